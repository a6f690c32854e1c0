"""Embedded workers forked from one process that imported torch once.

By default every Dask worker process is a fresh Python (multiprocessing's *spawn*): each
imports distributed, numpy, torch, gymnasium and workbench itself, ~1.5 s of CPU a worker.
On a 2-core machine, two workers doing that beside the notebook's own imports were most of
``workbench run quickstart --policy coarse``'s start. With multiprocessing's *forkserver*
one server process imports :data:`WORKER_PRELOAD` once and forks every worker from itself:
the embedded cluster came up 0.5-0.7 s sooner and closed 0.5 s sooner on this machine
(``docs/performance.md``). A worker its nanny *restarts* is a new Python again: the nanny
reads the start method from the global config when it restarts one, after the block that
set it has ended (its worker's settings it keeps: :mod:`workbench.cluster.restart_tolerant`).

Why forking it is safe here: the server only imports; it runs no torch or BLAS work, so no
OpenMP or BLAS thread pool exists when it forks (they start on first use), and Dask's nanny
has set ``OMP_NUM_THREADS`` and its siblings to 1 in the environment before the server
starts, so the pools start at that size in the workers; it never initialises CUDA (torch
and CuPy do so on first use, never at import), and CuPy is not preloaded. The server
ignores SIGINT (multiprocessing's own choice), so a Jupyter interrupt does not reach it.

``WORKBENCH_START_METHOD=spawn`` keeps Dask's default (a fresh Python per worker), for a
library that misbehaves when forked; it is also what happens where no forkserver exists.

Example::

    import dask
    with dask.config.set(worker_start_settings()):
        cluster = LocalCluster(n_workers=2, processes=True)
"""

from __future__ import annotations

import multiprocessing
import os

from workbench.cluster._dask_compat import claim_forkserver_preload, nanny_spawn_environment

__all__ = ["WORKER_PRELOAD", "START_METHOD_VARIABLE", "start_method", "worker_start_settings", "start_forkserver"]

#: what every embedded worker imports to run a replica, found by listing a worker's modules
#: after a coarse quickstart run; a module that is not installed is skipped by the server
WORKER_PRELOAD = (
    "distributed",
    "numpy",
    "torch",
    "gymnasium",
    "workbench.runtime.replicas.replica",
    "workbench.cluster.backend",
    "workbench.algorithms.ppo",
    "workbench.envs",
    "workbench.cluster.frozen_heap",  # last: freezes what the imports above made
)

#: the environment variable that picks how embedded workers start: forkserver or spawn
START_METHOD_VARIABLE = "WORKBENCH_START_METHOD"


def start_method() -> str:
    """How the embedded cluster starts its worker processes: ``forkserver`` where this
    platform has one, unless ``WORKBENCH_START_METHOD`` says ``spawn``.

    >>> start_method() in ("forkserver", "spawn")
    True
    """
    wanted = os.environ.get(START_METHOD_VARIABLE, "forkserver").strip().lower() or "forkserver"
    if wanted not in ("forkserver", "spawn"):
        raise ValueError(f"{START_METHOD_VARIABLE} must be forkserver or spawn, got {wanted!r}")
    if wanted == "forkserver" and "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    return wanted


def worker_start_settings() -> dict[str, object]:
    """Dask config for starting the embedded cluster's workers (see the module docstring).

    Sets the forkserver's preload list as a side effect; once the server runs (the first
    worker start) the list is fixed for the process, as multiprocessing has it.
    """
    method = start_method()
    if method == "forkserver":
        claim_forkserver_preload(list(WORKER_PRELOAD))
    return {"distributed.worker.multiprocessing-method": method}


def start_forkserver() -> None:
    """Start the forkserver now, under the Dask config in effect (call it inside
    ``dask.config.set(worker_start_settings())``), rather than when the first nanny starts
    its worker: its imports then run while the scheduler and its dashboard start, ~0.7 s
    sooner on a 2-core machine. It gets the environment the nanny would have given it: the
    nanny sets ``distributed.nanny.pre-spawn-environ`` (threads of 1, Dask's fixed
    ``PYTHONHASHSEED``) in this process's environment before each start, for good, and the
    server's children inherit the server's environment, not this process's later one. A
    no-op under spawn and once the server runs."""
    import dask

    if dask.config.get("distributed.worker.multiprocessing-method") != "forkserver":
        return
    from multiprocessing import forkserver

    os.environ.update(nanny_spawn_environment())  # what the nanny does before its first start
    forkserver.ensure_running()
