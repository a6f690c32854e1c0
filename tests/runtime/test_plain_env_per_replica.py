"""One plain env per replica (a gymnasium env, obs of shape (4,), a scalar reward): what a
reader of its observations sees must not depend on the placement (issue 30: two replicas'
(4,) observations reached the learner joined as features, [T, 8], where one replica gives
[T, 4], and the actor beside the learner under fine read (8,) every step).

By the counting rule a scalar reward is one env's (docs/counting.md): that replica's step
values have no batch axis, so across replicas they follow the rule for values without one
(docs/boundaries.md): the one value when every replica wrote the same, else an error that
names the value and the fix. The gather cannot see that from the arrays alone ((4,) is
also four envs' rewards), so the producing replica says it (runtime.arrays.Unbatched)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import workbench as wb
from workbench.fdg.policy import SingleLearnerCoarse, SingleLearnerFine

STEPS = 4


def _fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "gym": gym, "wb": wb})
    fdg.add_fragment("env", "env = gym.make('CartPole-v1')\nobs, _ = env.reset(seed=replica.index)", rate="init")
    fdg.add_fragment("actor", "wb.log('seen/actor_obs_size', float(np.size(obs)))\naction = 1", rate="step")
    fdg.add_fragment(
        "env",
        "obs, reward, terminated, truncated, info = env.step(action)\n"
        "if terminated or truncated:\n    obs, _ = env.reset()",
        rate="step",
    )
    fdg.add_fragment("learner", "wb.log('seen/learner_obs_last_axis', float(obs.shape[-1]))", rate="iteration")
    return fdg


def _seen(run) -> dict[str, float]:
    return {k: v for k, v in run.rows[0].items() if k.startswith("seen/")}


@pytest.mark.parametrize("policy", [SingleLearnerCoarse(actors=2), SingleLearnerFine(envs=2)], ids=["coarse", "fine"])
def test_a_plain_envs_observations_are_not_joined_as_features(client, policy):
    inline = _seen(_fdg().run(iterations=1, steps=STEPS, policy="inline", progress=False))
    assert inline["seen/learner_obs_last_axis"] == 4.0
    try:
        run = _fdg().run(iterations=1, steps=STEPS, policy=policy, cluster=client, progress=False)
    except wb.FragmentRuntimeError as exc:  # the rule's other outcome: replicas that differ, named
        assert "'obs'" in str(exc) and "replicas" in str(exc), str(exc)
        return
    assert _seen(run) == inline, (_seen(run), inline)
