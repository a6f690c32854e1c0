"""SingleLearnerFine with learner snapshots on (the default on a cluster) at 8 env replicas
on 8 single-thread workers: every replica's snapshot reaches the driver at once as each
iteration starts. It once stalled at iteration 0 (issue 15: the channel server's backlog
of 1 dropped connections in that burst)."""

from __future__ import annotations

import logging

import pytest

import workbench as wb
from tests.conftest import toy_fdg
from workbench.runtime.state.snapshots import SnapshotBook

WORKERS = 8
ITERATIONS = 3


@pytest.fixture()
def eight_workers():
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


def test_fine_with_snapshots_runs_at_eight_replicas(eight_workers, monkeypatch):
    filed = []
    put = SnapshotBook.put

    def spy(self, key, task, replica, value):  # the driver files every replica's snapshot
        filed.append((key, task, replica))
        put(self, key, task, replica, value)

    monkeypatch.setattr(SnapshotBook, "put", spy)
    run = toy_fdg().run(
        iterations=ITERATIONS, steps=2, policy=wb.SingleLearnerFine(envs=WORKERS), cluster=eight_workers, progress=False
    )
    assert [r["iteration"] for r in run.rows] == list(range(ITERATIONS))
    assert run.env_steps == ITERATIONS * 2 * 3 * WORKERS  # 3 counters per env replica
    # snapshots were on: every replica (8 env, 1 actor+learner) sent one per later iteration
    expected = {(f"snapshot:{g.name}", i) for g in run.policy.groups for i in range(g.replicas)}
    assert len(expected) == WORKERS + 1
    assert {(k, r) for k, t, r in filed if t == 1} == expected
