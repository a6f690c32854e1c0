"""Dask settings for many workers per core: less background work in every worker.

A Dask worker does work of its own between tasks: its statistical profiler samples every
thread every 10 ms, its event loop's tick monitor wakes every 20 ms, its system monitor
reads psutil every 500 ms, and its nanny reads the worker's memory every 100 ms. One
worker per core never notices. Many latency-bound workers per core do: an idle 32-worker
``LocalCluster`` used 1.45 of this 2-core machine's cores doing nothing, and took 9-18 s
to deploy a run (measured with ``benchmarks/bench_policies.py --scaling``'s cluster).
With :data:`QUIET_WORKER_CONFIG` it used 0.11 cores and deployed in under 2 s.

What it costs: the dashboard's *Profile* page (Dask's statistical profiler) stays empty
(workbench's own page and the task stream are unaffected), the System page updates every
5 s, and a worker past its memory limit is caught within 1 s instead of 0.1 s.

The embedded cluster uses these settings when it is started with more worker threads
than the machine has cores (:func:`oversubscribed`); the default (2 workers) keeps Dask's.
For workers you start yourself, put :func:`environment` in their environment::

    DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s \\
    DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL=5s \\
    DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL=1s dask worker tcp://SCHEDULER:8786 --nthreads 1

Example::

    import dask
    from workbench.cluster.quiet_workers import QUIET_WORKER_CONFIG
    with dask.config.set(QUIET_WORKER_CONFIG):
        cluster = LocalCluster(n_workers=32, threads_per_worker=1)
"""

from __future__ import annotations

import os
import sys

from workbench.cluster.pinning import usable_cores

__all__ = ["QUIET_WORKER_CONFIG", "environment", "oversubscribed", "deadlock_free_config"]

#: Dask config keys (dotted) and the values that quiet a worker's background work
QUIET_WORKER_CONFIG: dict[str, object] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}


def deadlock_free_config(version: tuple = sys.version_info) -> dict[str, object]:
    """Dask settings that keep a worker clear of a CPython 3.11 deadlock: the statistical
    profiler's ``sys._current_frames()`` holds the interpreter's thread-list lock while a
    garbage collection it triggers waits for the GIL, and a thread starting at that moment
    (a run's deploy starts channel threads) waits for the lock holding the GIL: the whole
    worker freezes until its nanny kills it (cpython#116969, dask/distributed#8616; seen here
    as a deploy hung for 467 s). Dask already skips its event-loop profiler on 3.11 for this;
    its per-thread one stays on, so workbench turns it off there (the dashboard's *Profile*
    page is then empty; workbench's page is not). Nothing on other versions.

    >>> deadlock_free_config((3, 11, 7)), deadlock_free_config((3, 12, 4))
    ({'distributed.worker.profile.enabled': False}, {})
    """
    return {"distributed.worker.profile.enabled": False} if tuple(version[:2]) == (3, 11) else {}


def environment(config: dict[str, object] | None = None) -> dict[str, str]:
    """:data:`QUIET_WORKER_CONFIG` as the environment variables Dask reads at start-up.

    >>> environment()["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"]
    'False'
    >>> environment()["DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL"]
    '5s'
    """
    config = QUIET_WORKER_CONFIG if config is None else config
    return {
        "DASK_" + "__".join(part.replace("-", "_").upper() for part in key.split(".")): str(value)
        for key, value in config.items()
    }


def oversubscribed(n_workers: int, threads_per_worker: int = 1, cores: int | None = None) -> bool:
    """True when the workers' threads outnumber the cores (where the lean settings pay).

    >>> oversubscribed(2, 1, cores=2), oversubscribed(32, 1, cores=2)
    (False, True)
    """
    cores = cores if cores is not None else len(usable_cores())
    return n_workers * threads_per_worker > cores


#: Overrides the embedded cluster's worker count (``WORKBENCH_WORKERS=8 workbench run …``).
WORKERS_OVERRIDE = "WORKBENCH_WORKERS"


def embedded_worker_count(environ=None, cores: int | None = None) -> int:
    """How many single-thread workers the embedded cluster starts: one per usable core (each
    replica then has a core of its own, the shape the scaling benchmarks measure), at least 2
    (so that the presets that replicate have two places), or ``WORKBENCH_WORKERS`` when set.

    >>> embedded_worker_count({}, cores=16), embedded_worker_count({}, cores=1)
    (16, 2)
    >>> embedded_worker_count({"WORKBENCH_WORKERS": "4"}, cores=16)
    4
    """
    environ = os.environ if environ is None else environ
    override = environ.get(WORKERS_OVERRIDE, "").strip()
    if override:
        try:
            count = int(override)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"{WORKERS_OVERRIDE}={override!r} must be a whole number of workers, 1 or more")
        return count
    return max(2, cores if cores is not None else len(usable_cores()))
