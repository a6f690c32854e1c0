"""Each embedded worker on a core of its own, when there are cores enough.

Linux moves a busy thread between cores as it sees fit; every move starts it on a cold cache.
An RL replica runs short Python steps back to back (an actor's step is ~100 µs), and on the
2-core machine the coarse policy at CleanRL's settings stepped 12-14 % faster with each worker
pinned to its own core (`python benchmarks/bench_peers.py --only throughput`, numbers in
docs/performance.md). So when the embedded cluster has at most one worker per core this
process may use, :class:`PinToCore` pins worker ``k`` (Dask names a ``LocalCluster``'s
workers 0, 1, …) to the ``k``-th of those cores: every thread the worker has, and so every
thread it starts later (a new thread takes its creator's cores). The notebook's own process
(scheduler, dashboard, the run's driver) is not pinned. With more workers than cores nothing
is pinned: the scheduler's balancing is then worth more than warm caches.

``WORKBENCH_PIN_WORKERS=0`` turns it off, e.g. on a machine whose other work would then share
a pinned worker's core.

Example::

    plugin = pinning_plugin(n_workers=2)     # None: not pinned (see above)
    if plugin is not None:
        client.register_plugin(plugin, name=PinToCore.name)
"""
from __future__ import annotations

import os

from distributed import WorkerPlugin

__all__ = ["PIN_VARIABLE", "PinToCore", "pinning_plugin", "pin_process", "usable_cores"]

#: the environment variable that turns pinning off (0) or on (1, the default)
PIN_VARIABLE = "WORKBENCH_PIN_WORKERS"


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity: containers and ``taskset`` narrow it).

    >>> len(usable_cores()) >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pinning_plugin(n_workers: int, threads_per_worker: int = 1) -> PinToCore | None:
    """The plugin that pins ``n_workers`` workers one to a core, or None where they would
    not each get a core of their own (more worker threads than cores), where the platform
    cannot pin, or where ``WORKBENCH_PIN_WORKERS`` is 0."""
    wanted = os.environ.get(PIN_VARIABLE, "1").strip()
    if wanted not in ("0", "1", ""):
        raise ValueError(f"{PIN_VARIABLE} must be 0 or 1, got {wanted!r}")
    cores = usable_cores()
    if wanted == "0" or not hasattr(os, "sched_setaffinity") or n_workers * threads_per_worker > len(cores):
        return None
    return PinToCore(cores[: n_workers * threads_per_worker], threads_per_worker)


def pin_process(cores: set[int]) -> int:
    """Pin every thread of this process to ``cores``; returns how many threads it pinned.
    (Linux keeps an affinity per thread: ``os.sched_setaffinity(0, …)`` moves only the
    calling one.)"""
    pinned = 0
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else [0]:
        try:
            os.sched_setaffinity(int(tid), cores)
            pinned += 1
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue
    return pinned


class PinToCore(WorkerPlugin):
    """Pins worker ``k`` to its ``threads_per_worker`` cores among ``cores`` (see the module
    docstring); a worker whose name is not a number is left alone."""

    name = "workbench-pin"

    def __init__(self, cores: list[int], threads_per_worker: int = 1) -> None:
        self.cores = list(cores)
        self.width = max(1, int(threads_per_worker))

    def setup(self, worker) -> None:
        try:
            index = int(worker.name)
        except (TypeError, ValueError):
            return
        start = (index * self.width) % len(self.cores)
        pin_process(set(self.cores[start:start + self.width]))
