"""Env steps are counted where envs step, in FDGs of every shape (docs/counting.md, "Env
steps are counted where envs step"): a reward shaper after the env adds nothing, two
environments stepped by two fragments add up, an env named otherwise is found by its
reward, and ``wb.count_env_steps`` is authoritative — a fragment that does not call it adds
no automatic counts on top."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.state.counting import env_fragments

N = 8  # envs, all replicas together
ITERATIONS, STEPS = 2, 5


def _fdg(**namespace) -> wb.FDG:
    return wb.FDG(namespace={"np": np, "wb": wb, "N": N, **namespace})


def shaper_fdg(by_hand: bool = False) -> wb.FDG:
    """The outside tester's shape: ``env`` writes ``raw_reward``, a ``shaper`` step
    fragment reads it and writes ``reward``; the learner records ``wb.env_steps()``."""
    fdg = _fdg()
    fdg.add_fragment("env", "obs = np.zeros((N // replica.count, 4))", rate="init")
    fdg.add_fragment("actor", "action = (obs[:, 0] > 0).astype(np.int64)", rate="step")
    count = "\nwb.count_env_steps(len(action))" if by_hand else ""
    fdg.add_fragment("env", "obs = obs + action[:, None]\nraw_reward = np.ones(len(obs))" + count, rate="step")
    fdg.add_fragment("shaper", "reward = raw_reward - 0.1 * np.abs(obs[:, 0])", rate="step")
    fdg.add_fragment("learner", "seen = []", rate="init")
    fdg.add_fragment("learner", "seen.append(wb.env_steps())\ntotal = float(reward.sum())", rate="iteration")
    return fdg


def two_envs_fdg(names=("env_a", "env_b"), rewards=("reward_a", "reward_b")) -> wb.FDG:
    """Two environments, stepped by two fragments that do not read each other: 6 + 2 envs."""
    fdg = _fdg()
    (a, b), (ra, rb) = names, rewards
    fdg.add_fragment(a, "xa = np.zeros(6 // replica.count)", rate="init")
    fdg.add_fragment(a, f"xa = xa + 1\n{ra} = np.ones_like(xa)", rate="step")
    fdg.add_fragment(b, "xb = np.zeros(2 // replica.count)", rate="init")
    fdg.add_fragment(b, f"xb = xb + 1\n{rb} = np.ones_like(xb)", rate="step")
    fdg.add_fragment("learner", f"total = float({ra}.sum() + {rb}.sum())", rate="iteration")
    return fdg


def renamed_env_fdg() -> wb.FDG:
    """An env named otherwise (``sim``) and a normaliser that transforms its reward."""
    fdg = _fdg()
    fdg.add_fragment("sim", "x = np.zeros(N // replica.count)", rate="init")
    fdg.add_fragment("sim", "x = x + 1\nreward = x.copy()", rate="step")
    fdg.add_fragment("normaliser", "rewards = (reward - reward.mean()) / 2.0", rate="step")
    fdg.add_fragment("learner", "total = float(rewards.sum())", rate="iteration")
    return fdg


def plain_env_shaper_fdg() -> wb.FDG:
    """One plain env per replica (3-number observation, scalar raw reward) and a shaper:
    one env step per replica per step, not the observation's length."""
    fdg = _fdg()
    fdg.add_fragment("env", "obs = np.zeros(3)", rate="init")
    fdg.add_fragment("actor", "action = int(obs[0] > 0)", rate="step")
    fdg.add_fragment("env", "obs = obs + action\nraw_reward = 1.0", rate="step")
    fdg.add_fragment("shaper", "reward = raw_reward - 0.5", rate="step")
    fdg.add_fragment("learner", "total = float(np.sum(reward))", rate="iteration")
    return fdg


def _run(fdg, policy, client):
    return fdg.run(
        iterations=ITERATIONS,
        steps=STEPS,
        policy=policy,
        progress=False,
        cluster=None if policy == "inline" else client,
        keep_state=True,
    )


# -- the rule, on the FDG alone -----------------------------------------------------------


def test_a_reward_shaper_after_the_env_is_not_an_env_fragment():
    assert env_fragments(shaper_fdg()) == ("env",)
    assert env_fragments(renamed_env_fdg()) == ("sim",)


def test_counting_by_hand_is_authoritative():
    assert env_fragments(shaper_fdg(by_hand=True)) == ("env",)
    fdg = shaper_fdg()  # a fragment that counts by hand, named neither env nor writing reward
    fdg.add_fragment("tally", "wb.count_env_steps(3)", rate="step")
    assert env_fragments(fdg) == ("tally",)


def test_two_environments_stepped_by_two_fragments_both_count():
    assert env_fragments(two_envs_fdg()) == ("env_a", "env_b")
    # named otherwise, found by their rewards (neither reads the other)
    assert env_fragments(two_envs_fdg(("cartpole", "acrobot"), ("reward", "rewards"))) == ("cartpole", "acrobot")


def test_no_env_fragment_the_last_step_fragment_counts():
    fdg = _fdg()
    fdg.add_fragment("a", "u = 1", rate="step")
    fdg.add_fragment("b", "v = u + 1", rate="step")
    assert env_fragments(fdg) == ("b",)


# -- real runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("by_hand", [False, True])
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_reward_shaper_does_not_double_the_env_steps(by_hand, policy, client):
    run = _run(shaper_fdg(by_hand), policy, client)
    assert run.env_steps == ITERATIONS * STEPS * N  # was twice that
    assert sum(run.replica_env_steps.values()) == ITERATIONS * STEPS * N
    assert run.envs_per_step == N
    # wb.env_steps() in a cell: the run's steps before each iteration, not doubled
    seen = [s for replica in run.state.fragments["learner"] for s in replica["seen"]]
    assert seen == [i * STEPS * N for i in range(ITERATIONS)]


def test_a_fragment_that_does_not_count_by_hand_adds_nothing_on_top(client):
    fdg = shaper_fdg()
    fdg.add_fragment("tally", "wb.count_env_steps(3)", rate="step")
    for policy in ("inline", "coarse"):
        run = _run(fdg, policy, client)
        # only what 'tally' counted (3 a step per replica), not 'env''s 8 envs on top
        assert run.env_steps == ITERATIONS * STEPS * 3 * len(run.replica_env_steps)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_two_environments_add_up(policy, client):
    for fdg in (two_envs_fdg(), two_envs_fdg(("cartpole", "acrobot"), ("reward", "rewards"))):
        run = _run(fdg, policy, client)
        assert run.env_steps == ITERATIONS * STEPS * (6 + 2)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_an_env_named_otherwise_counts_once_with_a_reward_normaliser(policy, client):
    assert _run(renamed_env_fdg(), policy, client).env_steps == ITERATIONS * STEPS * N


def test_a_plain_env_before_a_shaper_counts_one_env_per_step(client):
    run = _run(plain_env_shaper_fdg(), "coarse", client)
    replicas = len(run.replica_env_steps)
    assert run.env_steps == ITERATIONS * STEPS * replicas  # not 3 (the observation's length)


def test_fine_places_the_env_apart_and_counts_the_same(client):
    run = _run(shaper_fdg(), wb.SingleLearnerFine(envs=2), client)
    assert run.env_steps == ITERATIONS * STEPS * N
    assert all(key.startswith("env") for key in run.replica_env_steps)
