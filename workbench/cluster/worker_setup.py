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


from distributed import WorkerPlugin

from workbench.cluster.pinning import pin_shared_machines
from workbench.runtime.process.malloc import tune_malloc
from workbench.runtime.process.threads import limit_threads

__all__ = ["WorkerSetup", "ensure_worker_setup", "tune_malloc", "PLUGIN_NAME"]

PLUGIN_NAME = "workbench-setup"


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
        try:
            import torch  # noqa: F401  (loaded now: its pool is sized here, not at a cell's first use)
        except ImportError:
            pass
        self.threads = max(1, int(worker.state.nthreads))
        limit_threads(self.threads, pools_started_at_size=True)  # the worker's threads share a host
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
