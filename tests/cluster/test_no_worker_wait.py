"""A run started while the cluster has no worker — its only one was killed (as the kernel
kills a worker out of memory) and its nanny is starting a fresh one — waits for the worker
and trains, instead of failing with "needs a cluster with at least one worker"."""

from __future__ import annotations

import logging
import os
import signal
import time

import workbench as wb
from tests.conftest import toy_fdg


def _alive(client) -> int:
    return len(client.scheduler_info()["workers"])


def test_a_run_waits_for_a_killed_workers_restart(capsys):
    from distributed import Client

    from workbench.cluster.restart_tolerant import PatientLocalCluster

    with (
        PatientLocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.wait_for_workers(1, timeout=120)
        (pid,) = client.run(os.getpid).values()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(client) and time.monotonic() < deadline:  # the scheduler drops it
            time.sleep(0.05)
        assert _alive(client) == 0, "the killed worker was still listed"
        run = toy_fdg().run(
            iterations=2, steps=2, policy=wb.SingleLearnerCoarse(actors=1), cluster=client, progress=False
        )
        assert run.status == "finished" and run.completed_iterations == 2
        assert (pid,) != tuple(client.run(os.getpid).values())  # a fresh process trained it
    assert "the cluster has no worker now" in capsys.readouterr().out
