"""A ``LocalCluster`` that gives a restarting worker time to come back.

Dask's ``SpecCluster`` (and so ``LocalCluster``) closes a worker's nanny for good when no
worker of that name is back ``distributed.deploy.lost-worker-timeout`` (15 s) after one
left. That rule is meant for a worker *job* that died. But a nanny restarts its worker
itself, after a crash or after a stop ends a stuck cell's process
(:mod:`workbench.cluster.restarts`). A worker's start-up (Python, torch, workbench's
worker setup) takes 3–15 s on a busy 2-core machine, more when several start at once. So
a restart that takes longer than 15 s costs the cluster that worker for good: the nanny is
closed, and every later run finds fewer workers, or none.

:class:`PatientLocalCluster` waits ``LOST_WORKER_GRACE_S`` instead; the rest is
``LocalCluster``. The embedded cluster is one. On Python 3.11 its workers' statistical
profiler is off (:func:`~workbench.cluster.quiet_workers.deadlock_free_config`).

Its nannies keep the Dask config in effect when the cluster started (the caller's
``dask.config.set`` included: the embedded cluster's lean settings), for every restart of
their workers too. Dask's nanny keeps a shallow merge of the global config, whose inner
dicts ``dask.config.set`` restores in place when its block ends: a worker restarted after
that came back with Dask's defaults, its profiler on again (seen in a test run that
killed a worker of the session's cluster). A ``LocalCluster``
you start yourself can get the patience from the config::

    dask.config.set({"distributed.deploy.lost-worker-timeout": "2 minutes"})

Example:
    >>> from workbench.cluster.restart_tolerant import PatientLocalCluster
    >>> cluster = PatientLocalCluster(n_workers=1, processes=False)   # doctest: +SKIP
"""

from __future__ import annotations

import copy

import dask
from distributed import LocalCluster, Nanny

from workbench.cluster.quiet_workers import deadlock_free_config
from workbench.cluster.restarts import RESTART_WAIT_S

__all__ = ["PatientLocalCluster", "LOST_WORKER_GRACE_S"]

#: how long a worker that left may take to come back before its nanny is closed: as long
#: as the next run waits for a restarted worker
LOST_WORKER_GRACE_S = RESTART_WAIT_S


class PatientLocalCluster(LocalCluster):
    """``LocalCluster`` whose lost workers get ``LOST_WORKER_GRACE_S`` to restart (see the
    module docstring) before their nannies are closed."""

    def __init__(self, *args, **kwargs) -> None:
        # each nanny takes the config as it is now, for its worker and every restart of it
        with dask.config.set(deadlock_free_config()):
            if _nannies(kwargs):
                kwargs["config"] = started_config(kwargs.get("config"))
            super().__init__(*args, **kwargs)

    def _update_worker_status(self, op, msg):
        # SpecCluster reads the timeout here, when a worker leaves, and schedules the close
        # with it; a private hook, so if Dask renames it this override is simply not called
        # and Dask's 15 s applies
        with dask.config.set({"distributed.deploy.lost-worker-timeout": f"{LOST_WORKER_GRACE_S}s"}):
            super()._update_worker_status(op, msg)


def started_config(given: dict | None = None) -> dict:
    """The whole Dask config as it is now, a deep copy, with ``given`` (a nanny's own
    ``config=``) over it: what a nanny given it passes to every start of its worker,
    unchanged by ``dask.config.set`` blocks ending later.

    >>> with dask.config.set({"distributed.worker.profile.enabled": False}):
    ...     kept = started_config()
    >>> kept["distributed"]["worker"]["profile"]["enabled"], dask.config.get("distributed.worker.profile.enabled")
    (False, True)
    """
    return dask.config.merge(copy.deepcopy(dask.config.config), given or {})


def _nannies(kwargs: dict) -> bool:
    """Whether the cluster's workers are nannies (which take ``config=``): processes, the
    default, and no other worker class asked for."""
    worker_class = kwargs.get("worker_class")
    if worker_class is not None:
        return isinstance(worker_class, type) and issubclass(worker_class, Nanny)
    return kwargs.get("processes") is not False
