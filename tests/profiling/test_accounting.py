"""The runtime's timing adds up: per iteration, each group replica's compute + wait + send
(+ other: binding, stacking, emitting) is the iteration's wall time.

The machine running the tests may be busy (CI shares two cores, and CI itself may share the
machine): a descheduled thread takes any share of any iteration, so nothing here compares a
measured time with another one or with the machine's speed. What holds on any machine: a
sleep is never measured shorter than it slept; a replica's phases never add up to more than
the run's wall time (nothing is counted twice: the replicas' tasks all happen inside the
run); waiting is where the dataflow makes it (a learner cannot start before its rollouts)."""

from __future__ import annotations

import time

import numpy as np

import workbench as wb

ENV_STEP_S = 0.002  # each env step sleeps this long
LEARNER_S = 0.04  # each learner update sleeps this long
STEPS = 20
ITERATIONS = 10


def sleepy_fdg() -> wb.FDG:
    """tests/conftest.py's toy loop, with cells that sleep known amounts."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "time": time})
    fdg.add_fragment("env", "obs = np.arange(3.0) + 10 * replica.index\nseen = 0", rate="init")
    fdg.add_fragment("learner", "scale = 1.0\ntotal = 0.0", rate="init")
    fdg.add_fragment("actor", "gain = scale", rate="init")
    fdg.add_fragment("actor", "action = obs * gain", rate="step")
    fdg.add_fragment(
        "env",
        f"time.sleep({ENV_STEP_S})\nobs = obs + 1\nreward = action.copy()\n"
        "seen += 1\nwb.log('charts/episodic_return', float(reward.sum()))",
        rate="step",
    )
    fdg.add_fragment(
        "learner",
        f"time.sleep({LEARNER_S})\ntotal += float(reward.sum())\nwb.log('learner/total', total)\nscale = scale * 0.5",
        rate="iteration",
    )
    fdg.add_fragment("actor", "gain = scale", rate="iteration")
    return fdg


def _check(run, replicas: set[str]) -> None:
    by_it = run.profile_by_iteration()
    assert set(by_it.index.get_level_values("replica")) == replicas
    assert len(by_it) == len(replicas) * ITERATIONS
    assert (by_it[[f"{kind}_s" for kind in ("compute", "wait", "send", "other")]] >= 0).all().all()
    wall = run.rows[-1]["time_s"]
    accounted = by_it.groupby(level="replica")["accounted_s"].sum()
    over = accounted[accounted > wall]
    assert over.empty, f"a replica accounts more time than the run took ({wall:.3f} s):\n{by_it.to_string()}"


def _check_compute(run, env_replicas: int) -> None:
    """The sleeps show up as compute where they ran."""
    df = run.metrics.iloc[2:]
    _at_least(df["time/learner_compute_s"].min(), LEARNER_S)
    _at_least(df["time/env_compute_s"].min(), ENV_STEP_S * STEPS * env_replicas)


def _at_least(measured: float, slept: float) -> None:
    """A sleep of ``slept`` s was measured: never less (a busy machine may make it more)."""
    assert measured >= 0.95 * slept, (measured, slept)


def test_inline_accounting():
    run = sleepy_fdg().run(iterations=ITERATIONS, steps=STEPS, policy="inline", progress=False)
    _check(run, {"env+learner+actor[0]"})
    _check_compute(run, 1)
    prof = run.profile()
    assert {"env", "learner", "actor", "env+learner+actor[0]", "(run)"} <= set(prof.index)
    assert 0 < prof.loc["env+learner+actor[0]", "share_of_wall"] <= 1.0  # nothing counted twice


def test_coarse_accounting(client):
    run = sleepy_fdg().run(iterations=ITERATIONS, steps=STEPS, policy="coarse", cluster=client, progress=False)
    _check(run, {"actor+env[0]", "actor+env[1]", "learner[0]"})
    _check_compute(run, 2)
    prof = run.profile(skip=2)
    # per replica: each env replica computes its own rollouts; the learner waits for them
    _at_least(prof.loc["actor+env[0]", "compute_s_per_it"], ENV_STEP_S * STEPS)
    assert prof.loc["learner[0]", "wait_s_per_it"] > 0.5 * ENV_STEP_S * STEPS
    assert prof.loc["(run)", "bytes"] > 0


def test_profile_of_empty_run():
    from workbench.runtime.state.run import Run

    run = Run("inline", 1, 1)
    assert run.profile_by_iteration().empty
    assert list(run.profile().index) == ["(run)"]


def test_fine_accounting(client):
    """Per-step channels: the waiting inside the steps counts as wait, not as nothing."""
    run = sleepy_fdg().run(iterations=ITERATIONS, steps=STEPS, policy="fine", cluster=client, progress=False)
    replicas = set(run.profile_by_iteration().index.get_level_values("replica"))
    _check(run, replicas)
    _check_compute(run, sum(1 for name in replicas if "env" in name))
    prof = run.profile(skip=2)
    # the learner's update needs every env step of its iteration: it waits for them
    learner = next(name for name in replicas if name.startswith("learner"))
    assert prof.loc[learner, "wait_s_per_it"] > 0.5 * ENV_STEP_S * STEPS, prof.to_string()
    # of each replica's sending, its thread's CPU time: there, and never more than the wall
    # time (the per-step sends of the actor and the env replicas included)
    for name in replicas:
        for row in run.rows:
            cpu, wall = row[f"time/{name} send_cpu_s"], row[f"time/{name} send_s"]
            assert 0.0 <= cpu <= wall * 1.05 + 1e-3, (name, row["iteration"], cpu, wall)
    actor = next(name for name in replicas if "actor" in name)
    assert sum(row[f"time/{actor} send_cpu_s"] for row in run.rows) > 0  # STEPS sends an iteration
