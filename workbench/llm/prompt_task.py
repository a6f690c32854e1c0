"""Your own prompts as GRPO's task: what the cells draw from, hold out and measure, sized in
your tokenizer's tokens.

The GRPO cells read four things of ``task``: ``sample(rng, count)`` (training prompts),
``prompt_width`` (the widest prompt, in tokens), and for the warm start and held-out
accuracy ``answer(prompt)`` and ``answer_width``. :class:`AdditionTask` is one such task;
:class:`PromptTask` makes one from any list of prompts (and answers), for any tokenizer —
one that adds a BOS token, pads on the right, or merges characters into tokens.

Example:
    >>> from workbench.llm import char_tokenizer
    >>> task = PromptTask(["1+1=", "2+2=", "3+3=", "4+4=", "5+5="], ["2", "4", "6", "8", "10"],
    ...                   tokenizer=char_tokenizer(), seed=0)
    >>> task.prompt_width, task.answer_width, len(task.train), len(task.heldout)
    (4, 3, 4, 1)
    >>> task.answer("5+5=")
    '10'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.llm.errors import LLMInputError
from workbench.llm.tasks import check_special_tokens

__all__ = ["PromptTask"]


class PromptTask:
    """``prompts`` (and their ``answers``, optional) split into ``train`` and ``heldout`` (a
    ``heldout_fraction`` of the distinct prompts, fixed by ``seed``; never trained on).
    ``prompt_width`` is the longest prompt in ``tokenizer``'s tokens, special tokens it adds
    included; ``answer_width`` the longest answer plus its end-of-sequence token. Without
    answers the task trains (your reward scores completions) but has no warm start and no
    held-out accuracy: :meth:`answer` says so."""

    def __init__(
        self,
        prompts: Sequence[str],
        answers: Sequence[str] | None = None,
        *,
        tokenizer,
        heldout_fraction: float = 0.2,
        seed: int = 0,
    ) -> None:
        prompts, answers = _checked(prompts, answers, heldout_fraction)
        check_special_tokens(tokenizer)
        self._answers = dict(zip(prompts, answers)) if answers is not None else None
        distinct = list(dict.fromkeys(prompts))
        order = np.random.default_rng(seed).permutation(len(distinct))
        cut = int(round(len(distinct) * heldout_fraction))
        self.heldout = [distinct[i] for i in order[:cut]]
        self.train = [distinct[i] for i in order[cut:]]
        self.prompt_width = max(len(ids) for ids in tokenizer(distinct)["input_ids"])
        self.answer_width = (
            0
            if answers is None
            else max(
                len(ids)
                for ids in tokenizer([a + tokenizer.eos_token for a in set(answers)], add_special_tokens=False)[
                    "input_ids"
                ]
            )
        )

    def answer(self, prompt: str) -> str:
        """The answer given for ``prompt``."""
        if self._answers is None:
            raise LLMInputError(
                "this PromptTask was made without answers: the warm start and held-out "
                "accuracy compare completions with them. Pass answers=[…] (one per "
                "prompt), or train with your reward function alone."
            )
        try:
            return self._answers[prompt]
        except KeyError:
            raise LLMInputError(f"prompt {prompt!r} is not one of this task's prompts.") from None

    def sample(self, rng: np.random.Generator, count: int) -> list[str]:
        """``count`` training prompts drawn with replacement by ``rng``."""
        return [self.train[i] for i in rng.integers(0, len(self.train), count)]

    def __repr__(self) -> str:
        return (
            f"PromptTask({len(self.train)} training prompts, {len(self.heldout)} held out, prompt width "
            f"{self.prompt_width} tokens{'' if self._answers is None else f', answers up to {self.answer_width}'})"
        )


def _checked(prompts, answers, heldout_fraction: float) -> tuple[list[str], list[str] | None]:
    """The prompts and answers as lists, refused with a clear error when they cannot make a task."""
    if isinstance(prompts, str) or not all(isinstance(p, str) and p for p in prompts):
        raise LLMInputError(
            "PromptTask needs a list of non-empty prompt strings, e.g. "
            "PromptTask(['2+2=', '3+5='], ['4', '8'], tokenizer=tok)."
        )
    prompts = list(prompts)
    if not 0 <= heldout_fraction < 1:
        raise LLMInputError(f"heldout_fraction must be in [0, 1), got {heldout_fraction!r}.")
    if len(set(prompts)) - int(round(len(set(prompts)) * heldout_fraction)) < 1:
        raise LLMInputError(
            f"{len(set(prompts))} distinct prompt(s) leave none to train on with "
            f"heldout_fraction {heldout_fraction}: give more prompts or hold out fewer."
        )
    if answers is None:
        return prompts, None
    if isinstance(answers, str) or len(answers) != len(prompts) or not all(isinstance(a, str) for a in answers):
        raise LLMInputError(
            f"PromptTask needs one answer string per prompt: {len(prompts)} prompts, "
            f"{'a string' if isinstance(answers, str) else len(answers)} answers."
        )
    seen: dict[str, str] = {}
    for prompt, answer in zip(prompts, answers):
        if seen.setdefault(prompt, answer) != answer:
            raise LLMInputError(
                f"prompt {prompt!r} is given two answers, {seen[prompt]!r} and {answer!r}: "
                "an exact-answer task needs one."
            )
    return prompts, list(answers)
