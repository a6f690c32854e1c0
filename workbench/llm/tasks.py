"""The arithmetic task GRPO learns on a CPU in minutes: ``a+b=`` → the exact sum.

:class:`AdditionTask` splits every pair of operands into a training set and a held-out set
(fixed by ``seed``), encodes prompts to one left-padded width, and grades completions.
:func:`score_completions` runs the user's reward function with the checks that name the
prompt when it misbehaves; :func:`warm_start` is the short supervised phase that gives RL
something to sharpen; :func:`heldout_accuracy` measures greedy exact answers.

Example:
    >>> task = AdditionTask(max_operand=9, seed=0)
    >>> task.answer("3+4="), exact_answer_reward("3+4=", "7"), exact_answer_reward("3+4=", "8")
    ('7', 1.0, 0.0)
    >>> len(task.train) + len(task.heldout) == 100, task.prompt_width
    (True, 4)
    >>> score_completions(exact_answer_reward, ["1+1=", "2+2="], ["2", "5"]).tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from workbench.llm.errors import LLMInputError, RewardError
from workbench.llm.generation import sample, sequence_logp

__all__ = [
    "AdditionTask",
    "exact_answer_reward",
    "batched_reward",
    "score_completions",
    "encode_prompts",
    "check_special_tokens",
    "decode_completions",
    "answer_targets",
    "warm_start",
    "heldout_accuracy",
]


class AdditionTask:
    """Sums of two operands in ``0 … max_operand``; ``heldout`` (a ``heldout_fraction`` of the
    pairs) is never trained on. ``prompt_width`` fits the longest prompt; ``answer_width``
    the longest answer plus ``<eos>``."""

    def __init__(self, max_operand: int = 49, *, heldout_fraction: float = 0.2, seed: int = 0) -> None:
        pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
        order = np.random.default_rng(seed).permutation(len(pairs))
        cut = int(round(len(pairs) * heldout_fraction))
        self.heldout = [self.prompt(*pairs[i]) for i in order[:cut]]
        self.train = [self.prompt(*pairs[i]) for i in order[cut:]]
        self.prompt_width = len(self.prompt(max_operand, max_operand))
        self.answer_width = len(str(2 * max_operand)) + 1

    @staticmethod
    def prompt(a: int, b: int) -> str:
        return f"{a}+{b}="

    @staticmethod
    def answer(prompt: str) -> str:
        """The exact sum a prompt asks for, as text."""
        left, right = prompt.rstrip("=").split("+")
        return str(int(left) + int(right))

    def sample(self, rng: np.random.Generator, count: int) -> list[str]:
        """``count`` training prompts drawn with replacement by ``rng``."""
        return [self.train[i] for i in rng.integers(0, len(self.train), count)]


def exact_answer_reward(prompt: str, completion: str) -> float:
    """1 when the completion is exactly the sum (surrounding spaces ignored), else 0."""
    return 1.0 if completion.strip() == AdditionTask.answer(prompt) else 0.0


def batched_reward(fn):
    """Mark ``fn(prompts, completions) -> list of floats`` as a batched reward function
    (called once per batch rather than once per completion)."""
    fn.batched = True
    return fn


def _describe(value) -> str:
    text = repr(value)
    return (text[:60] + "…") if len(text) > 60 else text


def score_completions(reward_fn, prompts: list[str], completions: list[str]) -> np.ndarray:
    """One finite float per completion from ``reward_fn``: ``(prompt, completion) -> float``,
    or a :func:`batched_reward` taking the lists. Anything else is a :class:`RewardError`
    naming the function, the prompt and the completion."""
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    if getattr(reward_fn, "batched", False):
        try:
            values = list(reward_fn(prompts, completions))
        except Exception as exc:
            raise RewardError(
                f"the reward function {name} raised {type(exc).__name__}: {exc} on a batch "
                f"of {len(prompts)} completions (first prompt {prompts[0]!r})."
            ) from exc
        if len(values) != len(completions):
            raise RewardError(
                f"the reward function {name} returned {len(values)} rewards for "
                f"{len(completions)} completions (first prompt {prompts[0]!r}): a "
                "batched reward gives one number per completion, in order."
            )
    else:
        values = []
        for prompt, completion in zip(prompts, completions):
            try:
                values.append(reward_fn(prompt, completion))
            except Exception as exc:
                raise RewardError(
                    f"the reward function {name} raised {type(exc).__name__}: {exc} for "
                    f"prompt {prompt!r}, completion {completion!r}."
                ) from exc
    for value, prompt, completion in zip(values, prompts, completions):
        if not isinstance(value, numbers.Real):
            raise RewardError(
                f"the reward function {name} returned {_describe(value)} (a "
                f"{type(value).__name__}) for prompt {prompt!r}, completion "
                f"{completion!r}: it must return a float."
            )
        if not math.isfinite(value):
            raise RewardError(
                f"the reward function {name} returned {value} for prompt {prompt!r}, "
                f"completion {completion!r}: rewards must be finite numbers."
            )
    return np.asarray(values, dtype=np.float32)


def encode_prompts(
    tokenizer, prompts: list[str], width: int, *, max_new_tokens: int = 0, context: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask ``[B, width]``, left-padded whatever the tokenizer's own
    ``padding_side`` (most tokenizers pad on the right: generation continues a prompt from
    its last position). A prompt longer than ``width``, or a ``width + max_new_tokens`` past
    the model's ``context``, is an :class:`LLMInputError` naming the prompt and the sizes,
    and so is a tokenizer without a pad or an end-of-sequence token. Each distinct prompt is
    tokenized once (a GRPO batch repeats each ``group_size`` times)."""
    check_special_tokens(tokenizer)
    distinct = list(dict.fromkeys(prompts))
    lengths = [len(ids) for ids in tokenizer(distinct)["input_ids"]]
    longest = max(range(len(distinct)), key=lengths.__getitem__)
    if lengths[longest] > width:
        raise LLMInputError(
            f"prompt {distinct[longest]!r} is {lengths[longest]} tokens, longer than the "
            f"prompt width {width}: raise the width or shorten the prompt."
        )
    if context is not None and width + max_new_tokens > context:
        raise LLMInputError(
            f"prompt {distinct[longest]!r}: {width} prompt positions + {max_new_tokens} "
            f"new tokens need {width + max_new_tokens} positions but the model's "
            f"context is {context}: lower max_new_tokens or build the model with a "
            "longer context."
        )
    encoded = tokenizer(distinct, padding="max_length", max_length=width, padding_side="left", return_tensors="pt")
    row = {prompt: i for i, prompt in enumerate(distinct)}
    order = torch.tensor([row[prompt] for prompt in prompts])
    return encoded["input_ids"][order], encoded["attention_mask"][order]


def check_special_tokens(tokenizer) -> None:
    """Raise :class:`LLMInputError` unless ``tokenizer`` has a pad token (prompts of
    different lengths share a batch) and an end-of-sequence token (completions stop at it).
    GPT-2-style tokenizers have no pad token: ``tokenizer.pad_token = tokenizer.eos_token``."""
    missing = [name for name in ("pad_token", "eos_token") if getattr(tokenizer, f"{name}_id", None) is None]
    if missing:
        raise LLMInputError(
            f"the tokenizer ({type(tokenizer).__name__}) has no {' and no '.join(missing)}: GRPO pads prompts "
            "to one width and stops completions at the end-of-sequence token. Set them before building "
            "the FDG, e.g. tokenizer.pad_token = tokenizer.eos_token (a GPT-2-style tokenizer has no "
            "pad token), or tokenizer.add_special_tokens({'eos_token': '</s>'}) and resize the model's "
            "embeddings."
        )


def decode_completions(tokenizer, tokens: torch.Tensor) -> list[str]:
    """Completion texts: ``<eos>`` and padding dropped (``tokens`` on any device)."""
    return tokenizer.batch_decode(
        tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens, skip_special_tokens=True
    )


def warm_start(
    model,
    tokenizer,
    task: AdditionTask,
    *,
    steps: int = 300,
    batch: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    until: float | None = None,
    check_every: int = 25,
) -> list[float]:
    """Supervised next-token training on ``prompt → answer<eos>`` (loss on the answer only)
    for ``steps`` Adam steps, so that RL starts with a reward that is sometimes 1. Trains
    ``model`` in place; returns the losses.

    ``until``: stop as soon as greedy accuracy on 256 training prompts (drawn once) reaches
    it, checked every ``check_every`` steps; ``steps`` is then the most it runs. A fixed
    step count leaves seeds far apart (a small model learns addition suddenly: one seed at
    0.1 after 300 steps, another at 0.6), and GRPO barely moves a model that is almost never
    right, so a comparison over seeds starts each from the same accuracy instead.

        >>> from workbench.llm import char_tokenizer, load_causal_lm
        >>> tok, task = char_tokenizer(), AdditionTask(9, seed=0)
        >>> model = load_causal_lm(None, tok, hidden=32, layers=1, heads=2, context=12, seed=0)
        >>> len(warm_start(model, tok, task, steps=50, batch=8, until=0.0, check_every=10))
        10
    """
    if until is not None and check_every < 1:
        raise ValueError(f"warm_start: check_every must be a positive number of steps, not {check_every!r}.")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    probe = task.sample(np.random.default_rng(seed + 1), 256) if until is not None else []
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for step in range(1, steps + 1):
        prompts = task.sample(rng, batch)
        ids, mask = encode_prompts(tokenizer, prompts, task.prompt_width)
        targets = answer_targets(tokenizer, task, prompts)
        logp = sequence_logp(model, ids, mask, targets["input_ids"], targets["attention_mask"])
        answer = targets["attention_mask"].to(logp.device)  # the model's device
        loss = -(logp * answer).sum() / answer.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if until is not None and step % check_every == 0 and heldout_accuracy(model, tokenizer, task, probe) >= until:
            break
    model.eval()
    return losses


def answer_targets(tokenizer, task, prompts: list[str]):
    """The warm start's targets: each prompt's answer and ``<eos>`` as token ids, right-padded
    to ``task.answer_width``, with no special token the tokenizer adds at a text's start (the
    answer continues the prompt: a BOS there would teach the model to say BOS).

    >>> from workbench.llm import char_tokenizer
    >>> tok = char_tokenizer()
    >>> tok.batch_decode(answer_targets(tok, AdditionTask(9, seed=0), ["3+4=", "9+9="])["input_ids"])
    ['7<eos><pad>', '18<eos>']
    """
    return tokenizer(
        [task.answer(p) + tokenizer.eos_token for p in prompts],
        padding="max_length",
        add_special_tokens=False,
        max_length=task.answer_width,
        padding_side="right",
        return_tensors="pt",
    )


def heldout_accuracy(model, tokenizer, task: AdditionTask, prompts: list[str] | None = None) -> float:
    """Greedy exact-answer accuracy on ``prompts`` (default: the task's held-out set): the
    completion, spaces stripped, equals ``task.answer(prompt)`` (an :class:`AdditionTask` or a
    :class:`~workbench.llm.prompt_task.PromptTask` of your own prompts and answers)."""
    prompts = task.heldout if prompts is None else prompts
    ids, mask = encode_prompts(tokenizer, prompts, task.prompt_width)
    out = sample(
        model,
        ids,
        mask,
        max_new_tokens=task.answer_width,
        temperature=0,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
    )
    texts = decode_completions(tokenizer, out.tokens)
    return float(np.mean([c.strip() == task.answer(p) for p, c in zip(prompts, texts)]))
