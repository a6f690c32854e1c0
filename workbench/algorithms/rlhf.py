"""GRPO against a learned reward model (RLHF), written as workbench fragments.

GRPO's fragments (:mod:`workbench.algorithms.grpo`), with one change: the ``reward``
fragment holds a reward model (:class:`~workbench.llm.reward_model.RewardModel`) trained on
preference pairs before the run, and scores each completion with it instead of checking an
answer. The reward model is fragment state like the generate replica's policy: its init cell
moves it to ``replica.device``, so a policy places it like any fragment — beside generate
under ``coarse``, on a GPU of its own by hand (the board, or ``wb.Policy``). Re-running the
reward cell during a run swaps the reward (the reward model plus a format bonus, or back to
the exact answer) at the next iteration. ``notebooks/rlhf.ipynb`` holds the same cells, byte
for byte, and trains the reward model first (the policy's warm start, then the reward model
from it, as InstructGPT).

A policy optimised against a learned reward finds what the reward model scores too high.
The KL term to the reference holds it near the warm start: this module's ``cfg`` sets
``kl_coef=0.2`` (GRPO's default, 0.02, is for an exact reward): on this task, against reward
models that rank 81–92 % of held-out pairs right, GRPO raised held-out accuracy on 5 seeds of
5 at 0.2 and lowered it on 2 of 5 at 0.02 (``benchmarks/bench_rlhf.py``; docs/llm.md, "A
learned reward").

Example:
    >>> from workbench.algorithms import rlhf
    >>> fdg = rlhf.build_fdg()
    >>> sorted(fdg.fragments)
    ['generate', 'learner', 'prompts', 'reference', 'reward']
    >>> [line for line, _ in rlhf.FRAGMENT_CELLS if "reward" in line]
    ['%%fragment reward --init', '%%fragment reward']
"""

from __future__ import annotations

import numpy as np  # noqa: F401  (the cells read it)

import workbench as wb
from workbench.algorithms import grpo
from workbench.algorithms.grpo import (  # noqa: F401
    GRPOConfig,
    adam,
    generate_completions,
    grpo_update,
    make_model,
    prompt_batch,
    reference_logp,
)
from workbench.llm.errors import LLMInputError
from workbench.llm.models import context_length, frozen, load_weights, weights_copy  # noqa: F401
from workbench.llm.tasks import decode_completions, encode_prompts, heldout_accuracy, score_completions  # noqa: F401

__all__ = ["FRAGMENT_CELLS", "REWARD_CELLS", "build_fdg", "cfg", "task", "tokenizer", "reward_model"]

#: the reward fragment's cells: the reward model on the replica's device, then a score per completion
REWARD_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment reward --init",
        """\
scorer = reward_model.to(replica.device)   # the trained reward model, on this replica's device
""",
    ),
    (
        "%%fragment reward",
        """\
rewards = score_completions(scorer, prompt_texts, decode_completions(tokenizer, tokens))
""",
    ),
]


def _cells() -> list[tuple[str, str]]:
    """GRPO's cells, the reward's init cell after the reference's, the reward's step cell
    in place of GRPO's."""
    init, step = REWARD_CELLS
    cells = []
    for line, body in grpo.FRAGMENT_CELLS:
        cells.append(step if line == step[0] else (line, body))
        if line == "%%fragment reference --init":
            cells.append(init)
    return cells


#: each entry is one notebook cell: (magic line, body); the notebook holds them verbatim
FRAGMENT_CELLS: list[tuple[str, str]] = _cells()

cfg = GRPOConfig(kl_coef=0.2)
tokenizer = grpo.tokenizer
task = grpo.task


class _NoRewardModel:
    """What ``reward_model`` is until one is trained: the reward fragment's init cell moving
    it to a device says what to do."""

    def to(self, device):
        raise LLMInputError(
            "the reward fragment has no reward model: set reward_model to a trained "
            "RewardModel before the run (reward_model = reward_model_from(policy, tokenizer), "
            "then train_reward_model(reward_model, prompts, chosen, rejected); "
            "notebooks/rlhf.ipynb does both)."
        )

    def __repr__(self) -> str:
        return "<no reward model yet>"


#: the trained reward model the reward fragment scores with (the notebook sets it)
reward_model = _NoRewardModel()


def build_fdg(namespace: dict | None = None):
    """The RLHF FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module; set ``reward_model`` there, a trained
    :class:`~workbench.llm.reward_model.RewardModel`, before running it)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
