"""``act_on_arrival=True``: under SingleLearnerFine the actor's step cells run on whatever env
replicas' values are in, so a slow env replica no longer holds the fast ones back; with an
actor that draws nothing the learner sees exactly the lockstep batches; an actor step cell
that carries state from one step to the next is refused before anything runs; a policy with
no per-step gather says the option was not applied."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.errors import RunConfigError

STEPS = 6


def _fdg(slow_s: float = 0.0, actor: str = "action = (obs[:, 2] > 0).astype(np.int64)\nseen = obs\n"):
    import time

    fdg = wb.FDG(namespace={"wb": wb, "np": np, "time": time, "SLOW_S": slow_s})
    fdg.add_fragment(
        "env", "envs = wb.envs.make('CartPole-v1', num_envs=4, seed=replica.index)\nobs = envs.reset()", rate="init"
    )
    fdg.add_fragment("actor", actor, rate="step")
    # replica 0 is slow (a simulator that answers late); every step stamps when it ended
    fdg.add_fragment(
        "env",
        "time.sleep(SLOW_S if replica.index == 0 else 0.0)\n"
        "obs, reward, terminated, truncated, info = envs.step(action)\n"
        "stamp = np.full(len(obs), time.monotonic())",
        rate="step",
    )
    fdg.add_fragment("learner", "kept = (seen, action, reward, stamp)", rate="iteration")
    return fdg


def _kept(run):
    assert run.status == "finished", run.error
    return run.state.fragments["learner"][0]["kept"]


def test_fast_env_replicas_finish_their_steps_before_a_slow_one_is_halfway(client):
    fine = wb.SingleLearnerFine(envs=2)
    stamps = {}
    for on_arrival in (False, True):
        run = _fdg(slow_s=0.1).run(
            iterations=2, steps=STEPS, policy=fine, cluster=client, progress=False, act_on_arrival=on_arrival
        )
        stamps[on_arrival] = _kept(run)[3]  # [T, 8]: replica 0's envs are columns 0-3
    slow, fast = slice(0, 4), slice(4, 8)
    halfway = STEPS // 2
    # lockstep: every step waits for the slow replica, so the fast one's last step comes after
    assert stamps[False][-1, fast].max() > stamps[False][halfway, slow].min()
    # on arrival: the fast replica took all its steps while the slow one was still stepping
    assert stamps[True][-1, fast].max() < stamps[True][halfway, slow].min()


def test_an_actor_that_draws_nothing_gives_the_lockstep_batches(client):
    fine = wb.SingleLearnerFine(envs=2)
    lockstep = _kept(_fdg().run(iterations=3, steps=STEPS, policy=fine, cluster=client, progress=False))
    arrival = _kept(
        _fdg().run(iterations=3, steps=STEPS, policy=fine, cluster=client, progress=False, act_on_arrival=True)
    )
    for a, b in zip(lockstep[:3], arrival[:3]):  # observations, actions, rewards: [T, 8, …] alike
        assert a.shape == b.shape and np.array_equal(a, b)


def test_an_actor_that_carries_state_across_steps_is_refused_before_anything_runs(client):
    fdg = _fdg(actor="steps_seen = steps_seen + 1\naction = (obs[:, 2] > 0).astype(np.int64)\nseen = obs\n")
    fdg.add_fragment("actor", "steps_seen = 0", rate="init")
    with pytest.raises(
        RunConfigError,
        match=r"act_on_arrival: fragment 'actor' reads steps_seen in its step "
        r"cell, which a step cell of its group wrote the step before",
    ):
        fdg.run(
            iterations=1,
            steps=STEPS,
            policy=wb.SingleLearnerFine(envs=2),
            cluster=client,
            progress=False,
            act_on_arrival=True,
        )
    run = fdg.run(iterations=1, steps=STEPS, policy=wb.SingleLearnerFine(envs=2), cluster=client, progress=False)
    assert run.status == "finished"  # the FDG is as it was: without the option it runs


def test_a_policy_with_no_per_step_gather_says_it_was_not_applied():
    run = _fdg().run(iterations=1, steps=2, policy="inline", progress=False, act_on_arrival=True)
    said = [e.message for e in run.events if e.kind == "not applied"]
    assert run.status == "finished" and any("act_on_arrival applies to a group" in m for m in said)


def test_an_actor_step_that_raises_names_the_fragment_and_stops_the_run(client):
    from workbench.errors import FragmentRuntimeError

    fdg = _fdg(actor="action = (obs[:, 2] > 0).astype(np.int64)\nseen = obs\nassert len(obs) < 4, 'too many rows'\n")
    with pytest.raises(FragmentRuntimeError, match=r"too many rows") as caught:
        fdg.run(
            iterations=2,
            steps=STEPS,
            policy=wb.SingleLearnerFine(envs=2),
            cluster=client,
            progress=False,
            act_on_arrival=True,
        )
    assert caught.value.fragment == "actor" and caught.value.rate == "step" and caught.value.line == 3
