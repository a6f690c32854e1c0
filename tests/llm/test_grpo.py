"""GRPO's mechanisms: advantages and the loss's gradient against hand computations, masking,
weight sync bit for bit, lr 0 vs lr > 0, and the same seed under inline and coarse."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import workbench as wb  # noqa: E402
from workbench.algorithms import grpo  # noqa: E402
from workbench.llm import sample, sequence_logp  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402


def shorter_is_better(prompt: str, completion: str) -> float:
    """A reward that differs within the groups of an untrained model: learning signal every step."""
    return -float(len(completion))


def small_fdg(**changes):
    """The shipped GRPO FDG with a smaller batch (4 prompts × 4 completions per step) and a
    reward that always gives signal."""
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=4, group_size=4, **changes)
    return grpo.build_fdg(dict(vars(grpo), cfg=cfg, reward_fn=shorter_is_better)), cfg


def learner_and_generate(run):
    learner = run.state.fragments["learner"][0]
    return learner, [replica["policy"] for replica in run.state.fragments["generate"]]


def test_group_advantages_match_a_hand_computation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    # group 1: mean 0.5, unbiased std sqrt(1/3); group 2: all equal → 0
    std = (1 / 3) ** 0.5
    expected = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.5 / (std + 1e-4), 0, 0, 0, 0]
    assert torch.allclose(grpo.group_advantages(rewards, 4), torch.tensor(expected))


def test_loss_gradient_on_a_toy_case_is_the_hand_computation():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    ref = torch.tensor([[-1.5, -2.0, -0.5], [-0.3, -0.2, -3.0]])
    beta = 0.1
    loss, _ = grpo.grpo_loss(logp, logp.detach(), ref, adv, mask, clip_coef=0.2, kl_coef=beta)
    loss.backward()
    # ratio = 1 (unclipped): d/dlogp of -A·ratio is -A; of beta·(e^(ref-logp) - (ref-logp) - 1)
    # it is beta·(1 - e^(ref-logp)); the mean is over the 5 completion tokens
    hand = (-adv[:, None] + beta * (1 - (ref - logp.detach()).exp())) * mask / 5
    assert torch.allclose(logp.grad, hand)
    assert logp.grad[1, 2] == 0  # the padding token carries no loss


def test_clipped_ratio_passes_no_gradient():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.5, -0.5]], requires_grad=True)  # ratios e^0.5 > 1.2 and e^-0.5 < 0.8
    loss, stats = grpo.grpo_loss(logp, old, old, torch.tensor([1.0]), torch.ones(1, 2), clip_coef=0.2, kl_coef=0)
    loss.backward()
    # A > 0: the high ratio is clipped (no gradient), the low one is not (min takes it)
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] != 0 and stats["losses/clip_fraction"] == 1.0


def test_prompt_padding_and_tokens_after_eos_carry_no_loss():
    """The loss through a real model is the same whatever sits in masked positions."""
    tok, cfg = grpo.tokenizer, grpo.GRPOConfig()
    model = grpo.make_model(cfg, tok)
    ids, mask = encode_prompts(tok, ["1+2=", "13+14="], 6)
    assert mask[0, :2].tolist() == [0, 0]  # the short prompt is left-padded
    tokens = torch.tensor([[7, 1, 0, 0], [5, 11, 1, 0]])  # "3<eos>", "27<eos>", then padding
    completion_mask = torch.tensor([[1.0, 1.0, 0, 0], [1.0, 1.0, 1.0, 0]])

    def loss_of(ids, tokens):
        logp = sequence_logp(model, ids, mask, tokens, completion_mask)
        return grpo.grpo_loss(
            logp, logp.detach(), logp.detach(), torch.tensor([1.0, -1.0]), completion_mask, clip_coef=0.2, kl_coef=0.0
        )[0]

    garbage_ids, garbage_tokens = ids.clone(), tokens.clone()
    garbage_ids[0, :2] = 9  # other token ids under the prompt's padding
    garbage_tokens[:, 3] = 12  # and after <eos>
    garbage_tokens[0, 2] = 4
    assert loss_of(ids, tokens).item() == loss_of(garbage_ids, garbage_tokens).item()


def test_sampling_records_the_log_probs_a_full_forward_gives():
    tok = grpo.tokenizer
    model = grpo.make_model(grpo.GRPOConfig(), tok)
    ids, mask = encode_prompts(tok, ["1+2=", "13+14=", "0+0="], 6)
    out = sample(model, ids, mask, max_new_tokens=5, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, seed=3)
    with torch.no_grad():
        full = sequence_logp(model, ids, mask, out.tokens, out.completion_mask) * out.completion_mask
    assert torch.allclose(full, out.logp, atol=1e-5)
    ended = out.tokens == tok.eos_token_id  # after <eos>: padding, no mask
    for row in range(3):
        if ended[row].any():
            stop = int(ended[row].nonzero()[0])
            assert out.completion_mask[row, stop + 1 :].sum() == 0 and (out.tokens[row, stop + 1 :] == 0).all()


def _weights_equal(a, b) -> bool:
    return all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_after_a_weight_sync_generate_logits_equal_the_learners_bit_for_bit(policy, client):
    fdg, _ = small_fdg(learning_rate=1e-3)
    run = fdg.run(iterations=2, steps=1, policy=policy, cluster=None if policy == "inline" else client, progress=False)
    assert run.status == "finished", run.error
    learner, policies = learner_and_generate(run)
    ids, mask = encode_prompts(grpo.tokenizer, grpo.task.heldout[:8], grpo.task.prompt_width)
    with torch.no_grad():
        expected = learner["model"](input_ids=ids, attention_mask=mask).logits
        for replica_policy in policies:
            assert torch.equal(replica_policy(input_ids=ids, attention_mask=mask).logits, expected)
    assert len(policies) == (1 if policy == "inline" else 2)
    if policy == "coarse":  # the weights crossed the wire to both generate replicas
        assert run.metrics["wire/bytes"].iloc[-1] > 0


def test_lr_zero_leaves_the_weights_unchanged_and_lr_above_zero_changes_them():
    start = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer)
    frozen_fdg, _ = small_fdg(learning_rate=0.0)
    frozen = frozen_fdg.run(iterations=3, steps=1, progress=False)
    learner, (policy,) = learner_and_generate(frozen)
    assert _weights_equal(learner["model"], start) and _weights_equal(policy, start)
    assert np.isfinite(frozen.metrics["charts/reward_mean"]).all()

    trained_fdg, _ = small_fdg(learning_rate=1e-3)
    trained = trained_fdg.run(iterations=3, steps=1, progress=False)
    assert not _weights_equal(learner_and_generate(trained)[0]["model"], start)


def test_one_update_with_lr_above_zero_raises_the_likelihood_of_rewarded_completions():
    """The mechanism behind 'GRPO raises the training reward': one step moves log-probability
    mass toward the completions with positive advantage (first order in the step size)."""
    cfg = dataclasses.replace(grpo.GRPOConfig(), learning_rate=1e-3, kl_coef=0.0, group_size=8)
    tok, task = grpo.tokenizer, grpo.task
    model = grpo.make_model(cfg, tok)
    from workbench.llm.tasks import warm_start

    warm_start(model, tok, task, steps=60, seed=0)  # some groups then have mixed rewards
    prompts = grpo.prompt_batch(task, np.random.default_rng(0), cfg)
    ids, mask = encode_prompts(tok, prompts, task.prompt_width)
    out = sample(model, ids, mask, max_new_tokens=cfg.max_new_tokens, eos_id=1, pad_id=0, seed=0)
    from workbench.llm.tasks import decode_completions, score_completions

    rewards = score_completions(grpo.reward_fn, prompts, decode_completions(tok, out.tokens))
    adv = grpo.group_advantages(torch.as_tensor(rewards), cfg.group_size)
    assert adv.abs().sum() > 0, "no group with mixed rewards: the warm start did not give signal"

    def objective():
        with torch.no_grad():
            logp = sequence_logp(model, ids, mask, out.tokens, out.completion_mask)
            return float((adv[:, None] * logp * out.completion_mask).sum())

    before = objective()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    batch = [x[None] for x in (ids, mask, out.tokens, out.completion_mask, out.logp, torch.zeros_like(out.logp))]
    grpo.grpo_update(model, optimizer, cfg, *batch, rewards[None])
    assert objective() > before


def test_same_seed_same_weights_inline_and_coarse_with_one_generate_replica(client):
    fdg, _ = small_fdg(learning_rate=1e-3)
    inline = fdg.run(iterations=2, steps=2, progress=False)
    coarse = fdg.run(iterations=2, steps=2, policy=wb.SingleLearnerCoarse(actors=1), cluster=client, progress=False)
    assert _weights_equal(learner_and_generate(inline)[0]["model"], learner_and_generate(coarse)[0]["model"])
    assert inline.metrics["charts/reward_mean"].tolist() == coarse.metrics["charts/reward_mean"].tolist()


def test_lora_trains_only_the_adapters():
    pytest.importorskip("peft")
    from workbench.llm import with_lora

    base = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer)
    wrapped = with_lora(base, rank=4)  # every fragment copies it: it stays the starting point
    fdg, _ = small_fdg(learning_rate=1e-2, model=wrapped)
    run = fdg.run(iterations=2, steps=1, progress=False)
    learner, (policy,) = learner_and_generate(run)
    after = learner["model"].state_dict()
    changed = {k for k, v in after.items() if not torch.equal(v, policy.state_dict()[k])}
    assert not changed  # the generate replica holds the adapters too
    start = wrapped.state_dict()
    moved = {k for k in after if not torch.equal(after[k], start[k])}
    assert moved and all("lora_" in k for k in moved)


def test_a_model_passed_as_an_object_samples_the_same_run_after_run(client):
    """cfg.model given (a warm-started model, as the benchmark passes): building it draws
    nothing, so before make_model seeded the cell's draws itself, sampling followed whatever
    state the worker's generator had from the runs before, and two runs of one seed differed."""
    model = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer)
    fdg, _ = small_fdg(learning_rate=1e-3, model=model)
    runs = [fdg.run(iterations=3, steps=1, policy="pipelined", cluster=client, progress=False) for _ in range(2)]
    torch.rand(100)  # draws in this process between runs change nothing either
    runs.append(fdg.run(iterations=3, steps=1, progress=False))
    rewards = [run.metrics["charts/reward_mean"].tolist() for run in runs]
    assert rewards[0] == rewards[1]
    assert _weights_equal(learner_and_generate(runs[0])[0]["model"], learner_and_generate(runs[1])[0]["model"])
    # inline samples the first batch with the same weights and streams as pipelined
    assert rewards[2][0] == rewards[0][0]
