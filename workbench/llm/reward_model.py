"""A learned reward (RLHF): a reward model trained on preference pairs, scoring completions
in GRPO's ``reward`` fragment where a verifiable reward is not at hand.

The recipe is InstructGPT's, at notebook size: the reward model starts from the warm-started
(SFT) policy — its transformer, with a new scalar head (:func:`reward_model_from`) — and
learns from pairs of completions of one prompt where one is preferred (Bradley–Terry: the
loss is ``-log σ(r(chosen) − r(rejected))``, :func:`train_reward_model`). The pairs come
from wherever preferences come from: people, a stronger model, or, for a task with
answers, :func:`policy_preferences` (the answer over the policy's own wrong sample, so the
model learns to judge what the policy writes). A :class:`RewardModel` is a batched reward
function: ``score_completions`` runs it with its checks, in a cell of its own fragment that
any policy places (a GPU of its own, for instance). A reward model can be fooled — a policy
optimised against it finds what it scores too high — which is what the KL term to the
reference holds back (``cfg.kl_coef``; docs/llm.md, "A learned reward").

Example:
    >>> from workbench.llm import AdditionTask, char_tokenizer, tiny_causal_lm
    >>> tok, task = char_tokenizer(), AdditionTask(9, seed=0)
    >>> scorer = reward_model_from(tiny_causal_lm(tok, hidden=32, layers=1, context=8, seed=0), tok)
    >>> len(scorer(["3+4=", "3+4="], ["7", "8"]))
    2
    >>> losses = train_reward_model(scorer, ["3+4="] * 4, ["7"] * 4, ["8"] * 4, steps=20, batch=4, lr=1e-2)
    >>> preference_accuracy(scorer, ["3+4="], ["7"], ["8"])
    1.0
"""

from __future__ import annotations

import numpy as np
import torch

from workbench.llm.errors import LLMInputError
from workbench.llm.generation import model_device, positions, sample
from workbench.llm.models import check_vocabulary, context_length
from workbench.llm.tasks import decode_completions, encode_prompts

__all__ = ["RewardModel", "reward_model_from", "train_reward_model", "preference_accuracy", "policy_preferences"]


class RewardModel:
    """A sequence-classification ``model`` with one label and its ``tokenizer``, as a batched
    reward function ``(prompts, completions) -> list of floats``: each ``prompt + completion``
    is scored at its last token. Texts are left-padded to the longest in the batch, with
    positions counted from each text's first token, so a text's score does not depend on
    what shares its batch. Scoring runs without gradients on the model's device
    (:meth:`to` moves it: ``reward_model.to(replica.device)`` in the reward fragment's init
    cell)."""

    batched = True

    def __init__(self, model, tokenizer) -> None:
        if getattr(model.config, "num_labels", None) != 1:
            raise LLMInputError(
                f"a reward model scores each text with one number; this "
                f"{type(model).__name__} has {getattr(model.config, 'num_labels', '?')} labels. "
                "Build it with num_labels=1 (reward_model_from does)."
            )
        if getattr(model.config, "pad_token_id", None) is None:
            raise LLMInputError(
                f"the reward model's config has no pad_token_id, so it cannot find each "
                f"text's last token in a padded batch: set model.config.pad_token_id = "
                f"tokenizer.pad_token_id ({tokenizer.pad_token_id})."
            )
        check_vocabulary(model, tokenizer)
        self.model, self.tokenizer = model, tokenizer
        self.__name__ = f"RewardModel({type(model).__name__})"  # what score_completions' errors call it

    def to(self, device) -> RewardModel:
        """Move the model to ``device`` (in place); returns this reward model."""
        self.model.to(device)
        return self

    def state_dict(self) -> dict:
        """The model's weights: what a checkpoint of the reward fragment saves (the tokenizer
        is code the init cell brings again)."""
        return self.model.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Load weights saved by :meth:`state_dict` (a resume lays them over the reward
        model the fragment's init cell built)."""
        self.model.load_state_dict(state)

    def scores(self, prompts: list[str], completions: list[str]) -> torch.Tensor:
        """One score per ``prompt + completion``, ``[B]`` float32 on the model's device, with
        gradients when enabled (training). A text longer than the model's context is an
        :class:`LLMInputError` naming it."""
        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        encoded = self.tokenizer(texts, padding="longest", padding_side="left", return_tensors="pt")
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        context = context_length(self.model)
        if context is not None and ids.shape[1] > context:
            longest = int(mask.sum(1).argmax())
            raise LLMInputError(
                f"the reward model's context is {context} tokens; {texts[longest]!r} is "
                f"{int(mask[longest].sum())}: shorten the completions (max_new_tokens) or "
                "build the reward model with a longer context."
            )
        device = model_device(self.model)
        ids, mask = ids.to(device), mask.to(device)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        return logits.squeeze(-1).float()

    def __call__(self, prompts: list[str], completions: list[str]) -> list[float]:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                return self.scores(prompts, completions).cpu().tolist()
        finally:
            self.model.train(was_training)


def reward_model_from(policy, tokenizer) -> RewardModel:
    """A reward model that starts from ``policy``'s transformer (the warm-started, SFT model,
    as InstructGPT's does) with a new scalar head, as a :class:`RewardModel`. ``policy`` is a
    ``transformers`` causal LM (not a ``peft`` wrapper: pass its base model, or merge its
    adapters first); it is not changed."""
    from transformers import AutoModelForSequenceClassification

    if hasattr(policy, "get_base_model") and hasattr(policy, "peft_config"):
        raise LLMInputError(
            "reward_model_from takes a transformers causal LM, not a peft model: pass "
            "policy.merge_and_unload() (a copy with the adapters merged) instead."
        )
    config = policy.config.__class__.from_dict(policy.config.to_dict())
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id
    config.problem_type = "regression"
    with torch.random.fork_rng(devices=[]):  # the head's initial draw, fixed, and the caller's stream left as it was
        torch.manual_seed(0)
        scorer = AutoModelForSequenceClassification.from_config(config).to(model_device(policy))
    body = getattr(scorer, scorer.base_model_prefix)
    body.load_state_dict(getattr(policy, policy.base_model_prefix).state_dict())
    scorer.eval()
    return RewardModel(scorer, tokenizer)


def train_reward_model(
    reward_model: RewardModel,
    prompts: list[str],
    chosen: list[str],
    rejected: list[str],
    *,
    steps: int = 800,
    batch: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Bradley–Terry training on preference pairs: for each ``prompts[i]``, ``chosen[i]`` is
    preferred to ``rejected[i]``; each of ``steps`` Adam steps takes ``batch`` pairs drawn by
    ``seed`` and lowers ``-log σ(r(chosen) − r(rejected))``. Trains in place; returns the
    losses."""
    if not (len(prompts) == len(chosen) == len(rejected)) or not prompts:
        raise LLMInputError(
            f"train_reward_model needs one chosen and one rejected completion per prompt: got "
            f"{len(prompts)} prompts, {len(chosen)} chosen, {len(rejected)} rejected."
        )
    rng = np.random.default_rng(seed)
    model = reward_model.model
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        rows = rng.integers(0, len(prompts), batch)
        batch_prompts = [prompts[i] for i in rows]
        # one forward over both sides: the pair's scores come from the same weights and batch
        both = reward_model.scores(batch_prompts * 2, [chosen[i] for i in rows] + [rejected[i] for i in rows])
        loss = -torch.nn.functional.logsigmoid(both[:batch] - both[batch:]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def preference_accuracy(reward_model: RewardModel, prompts: list[str], chosen: list[str], rejected: list[str]) -> float:
    """The fraction of pairs the reward model scores the chosen completion above the rejected."""
    good, bad = reward_model(prompts, chosen), reward_model(prompts, rejected)
    return float(np.mean([g > b for g, b in zip(good, bad)]))


def policy_preferences(
    policy, tokenizer, task, prompts: list[str], *, max_new_tokens: int, temperature: float = 1.0, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Preference pairs for a task with answers (an :class:`~workbench.llm.AdditionTask` or a
    :class:`~workbench.llm.PromptTask` given answers), as a labeller comparing the policy's
    samples with the right answer would make them: for each prompt, ``(chosen, rejected)``
    = the answer and one completion ``policy`` sampled at ``temperature``; where that sample
    is right, the answer of the next prompt with another one stands in as the wrong answer.
    Returns the two lists, aligned with ``prompts``."""
    answers = [task.answer(p) for p in prompts]
    ids, mask = encode_prompts(
        tokenizer, prompts, task.prompt_width, max_new_tokens=max_new_tokens, context=context_length(policy)
    )
    with torch.no_grad():
        out = sample(
            policy,
            ids,
            mask,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
        )
    samples = decode_completions(tokenizer, out.tokens)
    rejected = []
    for i, (answer, sampled) in enumerate(zip(answers, samples)):
        if sampled.strip() != answer:
            rejected.append(sampled)
            continue
        # the next prompt's answer that differs (usually the very next): no list of all the others per pair
        other = next(
            (
                answers[(i + k) % len(answers)]
                for k in range(1, len(answers))
                if answers[(i + k) % len(answers)] != answer
            ),
            None,
        )
        if other is None:
            raise LLMInputError(
                f"policy_preferences: every prompt given has the answer {answer!r}, so no "
                "wrong answer can stand in where the policy was right; pass prompts with "
                "different answers."
            )
        rejected.append(other)
    return answers, rejected
