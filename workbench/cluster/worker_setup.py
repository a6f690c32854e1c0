"""What makes a worker fast for RL replicas, done on every worker — the user's own too.

The embedded cluster starts its workers with glibc's default malloc tuning, torch limited
to the worker's threads and the heavy imports paid up front (``cluster.connect``). A user's
``dask worker`` gets none of that: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``,
which also switches off glibc's adaptive mmap threshold, so every tensor over 128 KiB is
a fresh ``mmap`` and page-faults on first touch (the PPO learner ran ~1.5× slower).
:class:`WorkerSetup` is a ``WorkerPlugin`` that the Dask backend registers at run start
(:func:`ensure_worker_setup`); Dask runs it on every worker there now and on those that
join or restart later. It

1. puts back the malloc thresholds glibc's adaptive mode would settle at (``mallopt``
   through ctypes) where the environment pinned them;
2. gives torch (and BLAS, through threadpoolctl where installed) the worker's ``nthreads``;
3. imports numpy and torch and builds one optimizer (the first costs ~1.3 s of imports).

Nothing must be set before ``dask worker`` starts; ``docs/clusters.md`` says what can be.

Example::

    from workbench.cluster.worker_setup import ensure_worker_setup
    ensure_worker_setup(client)      # DaskBackend does this for every run
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from distributed import WorkerPlugin

__all__ = ["WorkerSetup", "ensure_worker_setup", "tune_malloc", "limit_threads", "PLUGIN_NAME"]

PLUGIN_NAME = "workbench-setup"

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: the mmap threshold glibc's adaptive mode grows to at most on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX):
#: blocks below it come from the heap and are reused, not mapped and faulted in afresh
MMAP_THRESHOLD = 32 * 1024 * 1024


def tune_malloc(environ=None) -> dict[str, int]:
    """Where ``MALLOC_TRIM_THRESHOLD_`` (or ``MALLOC_MMAP_THRESHOLD_``) pinned glibc's
    thresholds, set them to what its adaptive mode would reach; returns what was set
    (empty: nothing pinned them, not glibc, or not Linux)."""
    environ = os.environ if environ is None else environ
    if not ({"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"} & set(environ)) or not sys.platform.startswith("linux"):
        return {}
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt: nothing to undo
        return {}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # adaptive mode keeps trim = 2 × mmap threshold: memory is still given back, in big steps
    wanted = {"mmap_threshold": MMAP_THRESHOLD, "trim_threshold": 2 * MMAP_THRESHOLD}
    done = {}
    for name, param in (("mmap_threshold", _M_MMAP_THRESHOLD), ("trim_threshold", _M_TRIM_THRESHOLD)):
        if mallopt(param, wanted[name]) == 1:
            done[name] = wanted[name]
    return done


def limit_threads(nthreads: int) -> int:
    """Give torch's intra-op pool (and BLAS pools) this worker's threads: workers share a
    host, and spinning pools larger than the cores left make them fight (we measured 40×
    slowdowns on a busy 2-core machine). Returns the count set."""
    count = max(1, int(nthreads))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.get_num_threads() != count:
        torch.set_num_threads(count)
    if all(os.environ.get(name) == str(count) for name in _POOL_VARIABLES):
        return count  # the pools started at this size: Dask's nanny sets these to 1 in workers
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return count
    threadpool_limits(limits=count, user_api="blas")  # torch's own OpenMP pool: set above
    return count


#: what Dask's nanny sets to 1 before it spawns a worker (distributed.nanny.pre-spawn-environ)
_POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def warm_up() -> None:
    """Import the heavy libraries now so the first iteration is not slow."""
    import numpy  # noqa: F401

    try:
        import torch  # noqa: F401
    except ImportError:
        return
    # Not pre-paid: the first torch.optim optimizer a process builds imports torch._dynamo
    # (~1 s of CPU). workbench's own learners use FusedAdam (workbench.algorithms.optim),
    # which does not, and on a small host every worker paying it at start delayed the run.


class WorkerSetup(WorkerPlugin):
    """Tunes a worker for RL replicas (see the module docstring); idempotent."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        self.malloc = tune_malloc()
        self.threads = limit_threads(worker.state.nthreads)
        warm_up()


def _has_setup(dask_worker=None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


def ensure_worker_setup(client) -> None:
    """Register :class:`WorkerSetup` unless every worker already runs it (Dask keeps it on
    the scheduler, so workers that join later get it too)."""
    if not all(client.run(_has_setup).values()):
        client.register_plugin(WorkerSetup(), name=PLUGIN_NAME)
