"""Every preset runs the same cells on a real 2-worker LocalCluster, with the semantics the
plan promises (checked by value against a plain loop)."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from tests.cluster.test_coarse import _replicas_left
from tests.conftest import toy_fdg
from tests.runtime.test_inline import _expected_totals

BOTH = np.concatenate([np.arange(3.0), np.arange(3.0) + 10])


def test_fine_exchanges_every_step_and_matches_the_plain_loop(client):
    run = toy_fdg().run(iterations=3, steps=4, policy="fine", cluster=client, progress=False)
    assert run.policy_name == "SingleLearnerFine"
    # one env replica (on the other worker): the same numbers as inline
    assert run.metrics["learner/total"].tolist() == _expected_totals(3, 4, np.arange(3.0))


def test_fine_scatters_actions_to_several_env_replicas(client):
    run = toy_fdg().run(iterations=3, steps=2, policy=wb.SingleLearnerFine(envs=2), cluster=client, progress=False)
    assert run.metrics["learner/total"].tolist() == _expected_totals(3, 2, BOTH)
    assert run.env_steps == 3 * 2 * 6
    assert _replicas_left(client) == 0


def test_fine_plan_puts_no_weights_on_the_wire(client):
    fdg = toy_fdg()
    plan = fdg.plan(wb.SingleLearnerFine(envs=2), cluster=client)
    crossing = {(r.interface.name, r.interface.timing) for r in plan.routes}
    assert ("action", "per-step") in crossing and ("obs", "per-step") in crossing
    assert not any(name in ("scale", "gain") for name, _ in crossing)


def _allreduce_fdg():
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("env", "obs = np.full(2, float(replica.index))", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = obs + 0\nreward = action", rate="step")
    fdg.add_fragment(
        "learner",
        "local = float(reward.sum())\nmean = wb.allreduce(np.array([local]))\n"
        "wb.log('local', local)\nwb.log('mean', float(mean[0]))",
        rate="iteration",
    )
    return fdg


def test_multilearner_allreduces_across_learner_replicas(client):
    run = _allreduce_fdg().run(
        iterations=2, steps=3, policy=wb.MultiLearner(learners=2), cluster=client, progress=False
    )
    assert run.policy_name == "MultiLearner"
    # replica 0 sums 3 steps × 2 envs × 1 = 6; replica 1: 3 × 2 × 2 = 12; both see the mean 9
    assert run.rows[-1]["local"] == pytest.approx(9.0)  # mean over the two replicas' logs
    assert run.rows[-1]["mean"] == pytest.approx(9.0)
    assert run.metrics["mean"].tolist() == [9.0, 9.0]


def test_allreduce_is_the_identity_with_one_learner():
    run = _allreduce_fdg().run(iterations=1, steps=3, progress=False)
    assert run.rows[0]["mean"] == run.rows[0]["local"] == 3 * 2 * 1.0


def test_gpuonly_fuses_everything_on_one_worker(client):
    run = toy_fdg().run(iterations=3, steps=2, policy="GPUOnly", cluster=client, progress=False)
    assert run.policy_name == "GPUOnly"
    assert run.metrics["learner/total"].tolist() == _expected_totals(3, 2, np.arange(3.0))
    plan = toy_fdg().plan("GPUOnly", cluster=client)
    assert plan.routes == () and len(plan.policy.groups) == 1


def _async_fdg():
    """A3C's shape: actors send a per-iteration value, the learner applies each as it
    arrives and answers that actor with its newest state."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("env", "obs = np.zeros(2) + replica.index", rate="init")
    fdg.add_fragment("learner", "w = 0.0\napplied = 0", rate="init")
    fdg.add_fragment("actor", "seen = []", rate="init")
    fdg.add_fragment("actor", "seen.append(w)\naction = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = obs + 0\nreward = action", rate="step")
    fdg.add_fragment("actor", "g = float(reward.sum())\nwb.log('seen', seen[-1])", rate="iteration")
    fdg.add_fragment("learner", "w = w + g\napplied += 1\nwb.log('applied', applied)\nwb.log('g', g)", rate="iteration")
    return fdg


def test_async_learner_applies_each_replicas_value_as_it_arrives(client):
    run = _async_fdg().run(iterations=4, steps=3, policy=wb.Async(actors=2), cluster=client, progress=False)
    assert run.policy_name == "Async"
    # two applications per iteration (each row is their mean), in whatever order the
    # replicas arrive: no barrier, so one replica may run iterations ahead of the other
    assert sum(run.metrics["applied"]) * 2 == sum(range(1, 9))
    # replica 0 sends 3 steps × 2 envs × 1 = 6, replica 1 sends 3 × 2 × 2 = 12 each iteration
    assert run.metrics["g"].tolist() == [9.0] * 4
    assert _replicas_left(client) == 0


def test_async_plan_says_as_it_arrives(client):
    plan = _async_fdg().plan(wb.Async(actors=2), cluster=client)
    assert plan.policy.asynchronous and "as it arrives" in plan.explain()


def test_resume_under_another_policy_continues_exactly(client):
    whole = toy_fdg().run(iterations=6, steps=2, progress=False)
    first = toy_fdg().run(iterations=3, steps=2, progress=False, keep_state=True)
    assert first.state.iteration == 3
    second = toy_fdg().run(
        iterations=3,
        steps=2,
        policy=wb.SingleLearnerCoarse(actors=1),
        cluster=client,
        resume=first.state,
        progress=False,
    )
    assert second.metrics.index.tolist() == [3, 4, 5]
    totals = first.metrics["learner/total"].tolist() + second.metrics["learner/total"].tolist()
    assert totals == whole.metrics["learner/total"].tolist()


def test_resume_with_more_replicas_keeps_the_learner_and_restarts_envs(client):
    first = toy_fdg().run(iterations=2, steps=2, progress=False, keep_state=True)
    second = toy_fdg().run(iterations=1, steps=2, policy="coarse", cluster=client, resume=first.state, progress=False)
    # the learner's running total carries on; two fresh env replicas feed it
    gain = 0.25  # scale halved twice
    fresh = BOTH * gain + (BOTH + 1) * gain
    assert second.rows[0]["learner/total"] == pytest.approx(first.rows[-1]["learner/total"] + fresh.sum())


def test_auto_tries_presets_and_keeps_learning(client, capsys):
    fdg = toy_fdg()
    run = fdg.run(iterations=16, steps=2, policy="auto", cluster=client, progress=False)
    tried = [row["policy"] for row in run.auto_table]
    # no MultiLearner: the toy's learner never calls wb.allreduce (see test_auto_independent_learners)
    assert set(tried) == {"SingleLearnerCoarse", "SingleLearnerFine", "GPUOnly"}
    assert {row["unit"] for row in run.auto_table} == {"env-steps/s"} and all(row["rate"] > 0 for row in run.auto_table)
    assert run.policy_name.startswith("auto → ") and run.completed_iterations == 16
    totals = run.metrics["learner/total"].tolist()
    # never restarted from scratch (a restart would log the first iteration's total again)
    assert min(totals[1:]) > totals[0]
    assert "continuing with this" in capsys.readouterr().out
    assert _replicas_left(client) == 0


def test_auto_tries_pipelined_only_when_asked_to_allow_a_lag(client):
    fdg = toy_fdg()
    run = fdg.run(iterations=21, steps=2, policy="auto", auto_lag=2, cluster=client, progress=False)
    assert [row["policy"] for row in run.auto_table][-1] == "Pipelined" and len(run.auto_table) == 4
    assert run.completed_iterations == 21
    with pytest.raises(wb.RunConfigError, match="--auto-lag 1 widens what --policy auto tries.*pipelined"):
        fdg.run(iterations=2, steps=2, policy="coarse", auto_lag=1, cluster=client, progress=False)
    with pytest.raises(wb.RunConfigError, match="too few for policy auto.*Pipelined.*needs at least 9"):
        fdg.run(iterations=8, steps=2, policy="auto", auto_lag=1, cluster=client, progress=False)
    assert _replicas_left(client) == 0


@pytest.mark.parametrize("iterations", [3, 6])
def test_auto_refuses_a_run_too_short_to_try_every_candidate(client, iterations):
    """auto measures every preset it may choose, or refuses before any runs: it never
    'chooses' after trying one (a 3-iteration run used to try only the first)."""
    fdg = toy_fdg()
    with pytest.raises(wb.RunConfigError, match=r"too few for policy auto.*SingleLearnerFine.*needs at least 7"):
        fdg.run(iterations=iterations, steps=2, policy="auto", cluster=client, progress=False)
    assert _replicas_left(client) == 0
    assert fdg.run(iterations=7, steps=2, policy="auto", cluster=client, progress=False).completed_iterations == 7
