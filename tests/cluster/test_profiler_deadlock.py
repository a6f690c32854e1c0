"""On Python 3.11 the workers of workbench's clusters run without Dask's statistical
profiler: its ``sys._current_frames()`` can deadlock a worker against a thread starting
(cpython#116969), which froze a deploy for 467 s in CI (workbench.cluster.quiet_workers)."""

from __future__ import annotations

import sys


def _profiling(dask_worker=None) -> tuple:
    import dask

    return dask.config.get("distributed.worker.profile.enabled"), "profile" in dask_worker.periodic_callbacks


def test_workers_profile_only_where_it_cannot_deadlock(client):
    expected = sys.version_info[:2] != (3, 11)
    assert set(client.run(_profiling).values()) == {(expected, expected)}


def _settings(dask_worker=None) -> tuple:
    import os

    import dask

    return (
        os.getpid(),
        dask.config.get("distributed.admin.system-monitor.interval"),
        dask.config.get("distributed.worker.profile.enabled"),
        "profile" in dask_worker.periodic_callbacks,
    )


def test_a_worker_its_nanny_restarts_keeps_the_settings_its_cluster_started_with():
    """The nanny's copy of the config must outlive the ``dask.config.set`` block the cluster
    started in (the embedded cluster's lean settings): a worker killed and started again by
    its nanny gets them too, not Dask's defaults with the profiler on."""
    import logging
    import os
    import signal
    import time

    import dask
    from distributed import Client

    from workbench.cluster.quiet_workers import QUIET_WORKER_CONFIG
    from workbench.cluster.restart_tolerant import PatientLocalCluster

    with dask.config.set(QUIET_WORKER_CONFIG):
        cluster = PatientLocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
    with cluster, Client(cluster, set_as_default=False) as client:
        (before,) = client.run(_settings).values()
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 120
        after = before
        while after[0] == before[0] and time.monotonic() < deadline:
            time.sleep(0.5)
            after = next(iter(client.run(_settings).values()), before)
    assert after[0] != before[0], "the nanny did not restart its worker in 120 s"
    assert before[1:] == after[1:] == ("5s", False, False)
