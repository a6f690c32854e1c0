"""GRPO's cells unchanged under the other policies, changed while running, and resumed from a
checkpoint under another policy."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers")

from tests.live.test_live_changes import At, _landed  # noqa: E402
from tests.llm.test_grpo import shorter_is_better  # noqa: E402
from workbench.algorithms import grpo  # noqa: E402


def small(**changes):
    cfg = dataclasses.replace(grpo.GRPOConfig(), prompts_per_step=4, group_size=4, learning_rate=1e-3, **changes)
    namespace = dict(vars(grpo), cfg=cfg, reward_fn=shorter_is_better)
    return grpo.build_fdg(namespace), cfg


def same_weights(a, b) -> bool:
    """Bit-equal weights, wherever each model lives (on a GPU host a learner may be on
    the GPU and a generate replica or a fresh model on the CPU)."""
    return all(torch.equal(a.state_dict()[k].cpu(), b.state_dict()[k].cpu()) for k in a.state_dict())


def test_multilearner_learners_stay_identical_through_the_allreduce(client):
    fdg, _ = small()
    run = fdg.run(iterations=2, steps=1, policy="multilearner", cluster=client, progress=False)
    first, second = (replica["model"] for replica in run.state.fragments["learner"])
    start = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer)
    # each learner saw its own prompts; the averaged gradient keeps them equal, and moved
    assert same_weights(first, second) and not same_weights(first, start)
    assert run.metrics["charts/staleness"].tolist() == [0, 0]


@pytest.mark.parametrize("max_staleness", [0, 2])
def test_async_takes_each_arrival_once_and_keeps_the_staleness_bound(client, max_staleness):
    """Each arriving batch is learned from or, if its sampling weights lag the learner by
    more than cfg.max_staleness updates, dropped — never both, never a staler one learned
    (a replica that falls behind, e.g. slow to start on a busy machine, sends such batches;
    bound 0 forces some drops: two replicas cannot both sample from the newest weights)."""
    fdg, cfg = small(max_staleness=max_staleness)
    run = fdg.run(iterations=3, steps=1, policy="async", cluster=client, progress=False)
    generate = run.state.fragments["generate"]
    learner = run.state.fragments["learner"][0]
    updates, dropped = learner["update"], learner["dropped"]
    assert updates + dropped == 3 * len(generate) == 6
    assert run.metrics["charts/staleness"].max() <= cfg.max_staleness
    if max_staleness == 0:
        assert dropped > 0


def test_pipelined_generates_one_update_behind_and_the_learner_says_so(client):
    """Under Pipelined the generate replica samples iteration i + 1 while the learner
    learns from iteration i: every batch after the first is one update old (the clipped
    ratio against the sampling log-probabilities corrects for it), none is dropped."""
    fdg, _ = small()
    run = fdg.run(iterations=4, steps=1, policy="pipelined", cluster=client, progress=False)
    assert run.status == "finished", run.error
    assert run.metrics["charts/staleness"].tolist() == [0, 1, 1, 1]
    learner, (generate,) = run.state.fragments["learner"][0], run.state.fragments["generate"]
    assert learner["update"] == 4 and learner["dropped"] == 0
    # the last weights it loaded are those of update 3: one behind the learner's 4
    assert generate["policy_version"] == 3 and not same_weights(generate["policy"], learner["model"])


def test_auto_tries_pipelined_when_a_lag_is_allowed_and_its_trial_learns_one_update_behind(client):
    """``--auto-lag 1`` adds Pipelined to what auto measures (last); during its trial the
    learner learns from batches one update old, during the synchronous ones from fresh ones."""
    fdg, _ = small()
    run = fdg.run(iterations=21, steps=1, policy="auto", auto_lag=1, cluster=client, progress=False, unit="completions")
    assert run.status == "finished", run.error
    tried = [row["policy"] for row in run.auto_table]
    assert {row["unit"] for row in run.auto_table} == {"completions/s"} and all(
        row["rate"] > 0 for row in run.auto_table
    )
    # coarse, multilearner, gpuonly (fine needs env fragments), then Pipelined
    assert tried == ["SingleLearnerCoarse", "MultiLearner", "GPUOnly", "Pipelined"]
    staleness = run.metrics["charts/staleness"].tolist()
    # 4 iterations a trial: the synchronous presets' 12, then Pipelined's (its first batch
    # sampled before it made an update, then one behind)
    assert staleness[:12] == [0] * 12 and staleness[12:16] == [0, 1, 1, 1]


def test_gpuonly_falls_back_to_the_cpu_twin_without_a_gpu(client):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/gpu covers it")
    fdg, _ = small()
    run = fdg.run(iterations=2, steps=1, policy="gpuonly", cluster=client, progress=False)
    assert run.status == "finished" and run.policy.groups[0].device == "cpu"
    assert next(run.state.fragments["learner"][0]["model"].parameters()).device.type == "cpu"


def always_five(prompt: str, completion: str) -> float:
    return 5.0


def test_a_hot_reward_edit_reaches_the_next_iteration():
    fdg, _ = small()
    edit = At(1, lambda: fdg.update(reward_fn=always_five))
    run = fdg.run(iterations=5, steps=1, progress=False, loggers=[edit])
    rewards = run.metrics["charts/reward_mean"].tolist()
    applied = _landed(run, "updated")  # the exact boundary (update() said the earliest)
    assert edit.result <= applied < 5
    assert all(r <= 0 for r in rewards[:applied]) and all(r == 5.0 for r in rewards[applied:])


def test_an_updated_cfg_changes_lr_temperature_and_kl_from_the_next_iteration():
    fdg, cfg = small()
    changed = dataclasses.replace(cfg, learning_rate=0.0, temperature=0.5, kl_coef=0.0)
    edit = At(1, lambda: fdg.update(cfg=changed))
    run = fdg.run(iterations=5, steps=1, progress=False, loggers=[edit])
    applied, metrics = _landed(run, "updated"), run.metrics
    assert applied < 5
    assert metrics["charts/learning_rate"].tolist() == [1e-3] * applied + [0.0] * (5 - applied)
    kl = metrics["losses/kl"]
    assert kl.iloc[:applied].notna().all() and kl.iloc[applied:].isna().all()  # no reference pass at 0
    model = run.state.fragments["learner"][0]["model"]
    policy = run.state.fragments["generate"][0]["policy"]
    assert same_weights(model, policy)


def test_a_checkpoint_holds_model_optimiser_and_reference_and_resumes_under_another_policy(tmp_path, client):
    fdg, _ = small()
    first = fdg.run(
        iterations=2, steps=1, policy="coarse", cluster=client, progress=False, checkpoint_dir=str(tmp_path)
    )
    learner = first.state.fragments["learner"][0]
    resumed = fdg.run(iterations=2, steps=1, policy="inline", progress=False, resume=str(tmp_path))
    again = resumed.state.fragments["learner"][0]
    assert again["update"] == 4 and learner["update"] == 2
    # the optimiser went on from its saved moments (Adam's step count), the reference stayed frozen
    assert next(iter(again["optimizer"].state.values()))["step"] == 4
    start = grpo.make_model(grpo.GRPOConfig(), grpo.tokenizer)
    # the generate and reference replicas were re-made for the new count: the reference from the
    # starting weights the learner carried, generate from the learner's latest
    assert same_weights(resumed.state.fragments["reference"][0]["reference"], start)
    assert same_weights(resumed.state.fragments["generate"][0]["policy"], again["model"])
