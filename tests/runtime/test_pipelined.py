"""Pipelined runs on a real Dask cluster: the actors act with the learner's value ``lag``
iterations old — each iteration's batch says which value it was made with — and runs stop,
checkpoint and resume under any policy as unpipelined runs do."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb

T = 3  # steps per iteration


def versioned_loop() -> wb.FDG:
    """The learner counts its updates (``version``) and sends it every iteration; the actor
    stamps every step with the version it acts with; the learner logs the stamp it was sent."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("learner", "version = 0", rate="init")
    fdg.add_fragment("actor", "stamp = np.array([float(version)])", rate="step")
    fdg.add_fragment(
        "learner",
        "wb.log('seen', float(stamp.min()))\nwb.log('newest_seen', float(stamp.max()))\nversion = version + 1",
        rate="iteration",
    )
    return fdg


def seen(run) -> list[float]:
    assert run.status == "finished", run.error
    assert run.metrics["seen"].tolist() == run.metrics["newest_seen"].tolist()  # one version a batch
    return run.metrics["seen"].tolist()


@pytest.mark.parametrize(
    "policy, lag",
    [
        (wb.SingleLearnerCoarse(actors=1), 0),
        (wb.Pipelined(), 1),
        (wb.Pipelined(lag=2), 2),
        (wb.SingleLearnerCoarse(lag=1), 1),
    ],
)
def test_each_batch_is_made_with_the_learners_value_lag_updates_old(client, policy, lag):
    run = versioned_loop().run(iterations=6, steps=T, policy=policy, cluster=client, progress=False)
    assert seen(run) == [max(0, i - lag) for i in range(6)]
    assert run.policy.lag == lag


def test_the_actor_runs_on_its_own_worker_beside_the_learner(client):
    run = versioned_loop().run(iterations=2, steps=T, policy="pipelined", cluster=client, progress=False)
    acting, learning = run.policy.groups
    assert set(acting.workers).isdisjoint(learning.workers)


def test_a_pipelined_checkpoint_resumes_under_coarse_and_pipelined(client, tmp_path):
    """The checkpoint holds the state at an iteration boundary; a resumed pipeline refills:
    its first iterations act with the learner's value at the boundary (as the first
    iterations of a run act with its init value)."""
    fdg = versioned_loop()
    first = fdg.run(
        iterations=4, steps=T, policy="pipelined", cluster=client, progress=False, checkpoint_dir=str(tmp_path)
    )
    assert seen(first) == [0, 0, 1, 2]
    coarse = fdg.run(iterations=2, steps=T, policy="coarse", cluster=client, progress=False, resume=str(tmp_path))
    assert seen(coarse) == [4, 5]
    piped = fdg.run(iterations=3, steps=T, policy="pipelined", cluster=client, progress=False, resume=str(tmp_path))
    assert seen(piped) == [4, 4, 5]
