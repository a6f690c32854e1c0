"""A replica with no envs is an error, not a run that finishes counting nothing (issue 30):
``num_envs // replica.count`` is 0 for a replica when there are fewer envs than replicas,
and every env step that replica takes is an empty batch."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.fdg.policy import Group, Policy


def _fdg(num_envs: int) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "num_envs": num_envs})
    fdg.add_fragment("env", "n = num_envs // replica.count\nobs = np.zeros((n, 2))", rate="init")
    fdg.add_fragment("actor", "action = obs.sum(axis=1)", rate="step")
    fdg.add_fragment("env", "obs = obs + 1\nreward = action * 0.0", rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "total += float(reward.sum())", rate="iteration")
    return fdg


TWO_ENV_REPLICAS = Policy("two", (Group(("env", "actor"), 2, ("local", "local")), Group(("learner",), 1, ("local",))))


def test_fewer_envs_than_replicas_is_an_error_naming_the_replica():
    # 1 // 2 is 0 for both replicas: whichever steps first raises, naming itself
    with pytest.raises(
        wb.FragmentRuntimeError,
        match=r"(?s)fragment 'env' \(step cell\), replica (\d) .*empty batch.*"
        r"replica \1 of 2 has no envs to step.*give at least 2 envs",
    ):
        _fdg(num_envs=1).run(iterations=1, steps=2, policy=TWO_ENV_REPLICAS, progress=False)


def test_as_many_envs_as_replicas_counts_them():
    run = _fdg(num_envs=2).run(iterations=2, steps=3, policy=TWO_ENV_REPLICAS, progress=False)
    assert run.status == "finished" and run.env_steps == 2 * 3 * 2
