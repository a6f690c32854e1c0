"""GRPO settings it cannot learn with are refused where they are read, each saying why
(a group of one gave a NaN loss with "lower the learning rate", max_new_tokens 0 a torch
reshape error, temperature 0 or -1 a run that never learned and said nothing); and the
learner's forward runs without dropout unless asked (a GPT-2 config's 0.1 made the ratio
≠ 1 before any update, and inline ≠ coarse)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.algorithms import grpo
from workbench.llm import LLMInputError, sample
from workbench.llm.tasks import encode_prompts

BAD = [
    ({"group_size": 1}, "group_size ≥ 2, got 1: a completion's advantage is its reward against the others"),
    ({"group_size": 2.0}, "group_size ≥ 2, got 2.0"),
    ({"prompts_per_step": 0}, "prompts_per_step ≥ 1, got 0"),
    ({"max_new_tokens": 0}, "max_new_tokens ≥ 1, got 0: a completion needs room for one token"),
    ({"temperature": 0.0}, "temperature > 0, got 0.0: 0 is greedy decoding, so the completions of a prompt are all"),
    ({"temperature": -1.0}, "temperature > 0, got -1.0: a negative one samples the least likely tokens first"),
    ({"top_p": 0.0}, "0 < top_p ≤ 1, got 0.0"),
    ({"top_p": 2.0}, "0 < top_p ≤ 1, got 2.0"),
    ({"clip_coef": -0.5}, "clip_coef > 0, got -0.5"),
    ({"kl_coef": -1.0}, "kl_coef ≥ 0, got -1.0"),
    ({"learning_rate": float("nan")}, "learning_rate ≥ 0, got nan"),
]


@pytest.mark.parametrize(
    "change, message", BAD, ids=[next(iter(c)) + "=" + str(next(iter(c.values()))) for c, _ in BAD]
)
def test_a_setting_grpo_cannot_learn_with_says_why(change, message):
    with pytest.raises(LLMInputError, match="GRPO needs " + message.replace("(", r"\(").replace(")", r"\)")):
        grpo.check_config(dataclasses.replace(grpo.GRPOConfig(), **change))


def test_the_defaults_and_the_edges_are_taken():
    for change in (
        {},
        {"group_size": 2, "top_p": 1.0, "kl_coef": 0.0, "learning_rate": 0.0},
        {"group_size": np.int64(4)},
    ):
        grpo.check_config(dataclasses.replace(grpo.GRPOConfig(), **change))


def test_a_run_with_a_group_of_one_stops_at_the_prompts_fragment_before_anything_trains():
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=4, group_size=1)
    fdg = grpo.build_fdg(dict(vars(grpo), cfg=cfg))
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=2, steps=1, progress=False)
    assert info.value.fragment == "prompts" and info.value.iteration == 0
    assert "GRPO needs group_size ≥ 2" in str(info.value) and "lower the learning rate" not in str(info.value)


def _gpt2_with_dropout(tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=16,
            n_embd=32,
            n_layer=1,
            n_head=2,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            resid_pdrop=0.1,
            embd_pdrop=0.1,
            attn_pdrop=0.1,
        )
    )


@pytest.mark.parametrize("dropout", [False, True])
def test_the_first_update_scores_with_the_sampling_weights_unless_dropout_is_asked_for(dropout):
    """Before any update the learner's weights are the sampler's: without dropout the ratio
    is 1 up to rounding (no token off by 0.1 %, the KL to itself ~0); with it, each forward
    draws its own masks."""
    tok, task = grpo.tokenizer, grpo.task
    cfg = dataclasses.replace(
        grpo.GRPOConfig(),
        model=_gpt2_with_dropout(tok),
        group_size=4,
        prompts_per_step=4,
        dropout=dropout,
        clip_coef=1e-3,
        learning_rate=0.0,
    )
    model = grpo.make_model(cfg, tok)
    prompts = grpo.prompt_batch(task, np.random.default_rng(0), cfg)
    ids, mask = encode_prompts(tok, prompts, task.prompt_width)
    out = sample(
        model, ids, mask, max_new_tokens=cfg.max_new_tokens, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, seed=0
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    batch = [x[None] for x in (ids, mask, out.tokens, out.completion_mask, out.logp, out.logp)]
    rewards = np.arange(len(prompts), dtype=np.float32)[None]
    stats = grpo.grpo_update(model, optimizer, cfg, *batch, rewards)
    if dropout:
        assert stats["losses/clip_fraction"] > 0  # masks drawn: the ratio moved off 1
    else:
        assert stats["losses/clip_fraction"] == 0 and abs(stats["losses/kl"]) < 1e-6
