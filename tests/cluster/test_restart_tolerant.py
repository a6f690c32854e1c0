"""A worker whose restart is slower than Dask's lost-worker timeout comes back.

A plain ``LocalCluster`` closes the nanny of a worker that is not back within
``distributed.deploy.lost-worker-timeout`` of leaving: it then has that worker never
again. On a busy machine a restart (after a crash, or after a stop ended a stuck cell's
process) can take longer than the 15 s default; CI once lost both workers of its shared
cluster that way. Here the timeout is shrunk and the workers' start-up slowed (a preload
that sleeps), so a restart takes longer than the timeout on any machine: the plain
cluster is the control that shows the test can fail.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import dask
import pytest
from distributed import Client, LocalCluster

from workbench.cluster._dask_compat import workers_info
from workbench.cluster.restart_tolerant import PatientLocalCluster

#: the timeout the plain cluster gets, and how long a worker's start-up sleeps (longer)
SHRUNK_TIMEOUT_S, START_SLEEP_S = 0.5, 2.0


@pytest.fixture
def slow_start(tmp_path):
    path = tmp_path / "slow_start.py"
    path.write_text(f"import time\n\ndef dask_setup(worker):\n    time.sleep({START_SLEEP_S})\n")
    return str(path)


def _pid(dask_worker=None) -> int:
    return os.getpid()


def _workers_after_a_slow_restart(cluster_class, preload: str) -> tuple[int, list]:
    """(workers the scheduler has, names the cluster keeps) once a killed worker's slow
    restart is over and the shrunk timeout long past."""
    with dask.config.set({"distributed.deploy.lost-worker-timeout": f"{SHRUNK_TIMEOUT_S}s"}):
        with (
            cluster_class(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,
                preload=[preload],
            ) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):
            os.kill(next(iter(client.run(_pid).values())), signal.SIGKILL)
            deadline = time.monotonic() + 60
            # the restart is done when 2 are back, or when the control's nanny has been closed
            while time.monotonic() < deadline:
                time.sleep(0.2)
                if len(workers_info(client)) == 2 or len(cluster.workers) < 2:
                    break
            time.sleep(SHRUNK_TIMEOUT_S + 1)  # past the timeout of the worker's leaving
            return len(workers_info(client)), sorted(cluster.workers)


def test_a_worker_slower_to_restart_than_the_timeout_comes_back(slow_start):
    assert _workers_after_a_slow_restart(PatientLocalCluster, slow_start) == (2, [0, 1])


def test_control_a_plain_local_cluster_loses_that_worker(slow_start):
    workers, names = _workers_after_a_slow_restart(LocalCluster, slow_start)
    assert workers == 1 and len(names) == 1
