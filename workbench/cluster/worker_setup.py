"""What makes a worker fast for RL replicas, done on every worker — the user's own too.

The embedded cluster starts its workers with glibc's default malloc tuning, torch limited
to the worker's threads and the heavy imports paid up front (``cluster.connect``). A user's
``dask worker`` gets none of that: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``,
which also switches off glibc's adaptive mmap threshold, so every tensor over 128 KiB is
a fresh ``mmap`` and page-faults on first touch (the PPO learner ran ~1.5× slower).
:class:`WorkerSetup` is a ``WorkerPlugin`` that the Dask backend registers at run start
(:func:`ensure_worker_setup`); Dask runs it on every worker there now and on those that
join or restart later. It

1. sets glibc's malloc thresholds to its adaptive mode's maximum (``mallopt`` through
   ctypes; `workbench.runtime.process.malloc`), which also undoes the nanny's pinned one;
2. gives torch (and BLAS, through threadpoolctl where installed) the worker's ``nthreads``;
3. imports numpy and torch;

and :func:`ensure_worker_setup` pins the workers that share a machine to cores of their own
where they fit, as the embedded cluster's are (:mod:`workbench.cluster.pinning`).

Nothing must be set before ``dask worker`` starts; ``docs/clusters.md`` says what can be.

Example::

    from workbench.cluster.worker_setup import ensure_worker_setup
    ensure_worker_setup(client)      # DaskBackend does this for every run
"""
from __future__ import annotations

import os

from distributed import WorkerPlugin

from workbench.cluster.pinning import pin_shared_machines
from workbench.runtime.process.malloc import tune_malloc

__all__ = ["WorkerSetup", "ensure_worker_setup", "tune_malloc", "limit_threads", "PLUGIN_NAME"]

PLUGIN_NAME = "workbench-setup"

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
    the scheduler, so workers that join later get it too), and pin workers that share a
    machine to cores of their own where they fit (:mod:`workbench.cluster.pinning`)."""
    if not all(client.run(_has_setup).values()):
        client.register_plugin(WorkerSetup(), name=PLUGIN_NAME)
    pin_shared_machines(client)
