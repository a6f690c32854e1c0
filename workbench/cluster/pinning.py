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

Workers you start yourself (``dask worker``) are pinned the same way at a run's start
(:func:`pin_shared_machines`): the workers of one machine — the same kernel boot, whatever
their network namespace or address — that may use the same cores and whose threads fit
them get cores of their own. A user's two ``dask worker --nthreads 1`` on the 2-core box
trained the quickstart at 0.91× the embedded cluster's rate unpinned, and 0.95× with the
embedded cluster unpinned too (``benchmarks/bench_external_workers.py``, docs/clusters.md).

``WORKBENCH_PIN_WORKERS=0`` turns it off — in the notebook's environment for every worker,
in a worker's for that worker —, e.g. on a machine whose other work would then share a
pinned worker's core.

Example::

    plugin = pinning_plugin(n_workers=2)     # None: not pinned (see above)
    if plugin is not None:
        client.register_plugin(plugin, name=PinToCore.name)
"""

from __future__ import annotations

import os

from distributed import WorkerPlugin

__all__ = [
    "PIN_VARIABLE",
    "PinToCore",
    "pinning_plugin",
    "pin_process",
    "usable_cores",
    "core_assignment",
    "pin_shared_machines",
]

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


def _pinning_wanted() -> bool:
    wanted = os.environ.get(PIN_VARIABLE, "1").strip()
    if wanted not in ("0", "1", ""):
        raise ValueError(f"{PIN_VARIABLE} must be 0 or 1, got {wanted!r}")
    return wanted != "0" and hasattr(os, "sched_setaffinity")


def pinning_plugin(n_workers: int, threads_per_worker: int = 1) -> PinToCore | None:
    """The plugin that pins ``n_workers`` workers one to a core, or None where they would
    not each get a core of their own (more worker threads than cores), where the platform
    cannot pin, or where ``WORKBENCH_PIN_WORKERS`` is 0."""
    cores = usable_cores()
    if not _pinning_wanted() or n_workers * threads_per_worker > len(cores):
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
        pin_process(set(self.cores[start : start + self.width]))


def _machine_id() -> str | None:
    """This kernel's boot id: the same in every network namespace and container of one
    machine; None where there is none (not Linux: nothing to pin with)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _where_am_i(dask_worker=None) -> dict:
    """On a worker: its machine (the kernel's boot id, shared by every network namespace and
    container of one kernel), the cores it may use, its threads, and whether it may be pinned."""
    machine = _machine_id()
    return {
        "machine": machine,
        "process": os.getpid(),
        "cores": usable_cores(),
        "nthreads": dask_worker.state.nthreads,
        "pinnable": machine is not None and _pinning_wanted(),
    }


def core_assignment(workers: dict[str, dict], client: tuple | None = None) -> dict[str, list[int]]:
    """Which cores each worker gets (:func:`_where_am_i`'s answers by worker address): the
    workers of one machine that may use the same cores, and whose threads together fit
    them, each get cores of their own, in address order. A worker keeps what it has when it
    is on no more cores than its threads already (pinned), is not pinnable, or shares its
    process with another worker or with the client (``client=(machine, process)``: a
    ``LocalCluster(processes=False)``, whose pinning would pin the notebook); so does every
    worker of a machine whose workers do not fit.

    >>> one = {"machine": "m", "process": 1, "cores": [0, 1], "nthreads": 1, "pinnable": True}
    >>> core_assignment({"tcp://b:1": {**one, "process": 2}, "tcp://a:1": one})
    {'tcp://a:1': [0], 'tcp://b:1': [1]}
    >>> core_assignment({"a": one, "b": {**one, "process": 2}, "c": {**one, "process": 3}})   # 3 threads, 2 cores
    {}
    >>> core_assignment({"a": one, "b": {**one, "machine": "n"}})   # two machines: each its own first core
    {'a': [0], 'b': [0]}
    >>> core_assignment({"a": one, "b": one}), core_assignment({"a": one}, client=("m", 1))   # threads of one process
    ({}, {})
    """
    processes: dict[tuple, int] = {}
    for w in workers.values():
        key = (w["machine"], w.get("process"))
        processes[key] = processes.get(key, 0) + 1
    machines: dict[tuple, list[str]] = {}
    for address in sorted(workers):
        w = workers[address]
        process = (w["machine"], w.get("process"))
        if not w["pinnable"] or len(w["cores"]) <= w["nthreads"] or processes[process] > 1 or process == client:
            continue
        machines.setdefault((w["machine"], tuple(w["cores"])), []).append(address)
    assignment: dict[str, list[int]] = {}
    for (_, cores), addresses in machines.items():
        if sum(workers[a]["nthreads"] for a in addresses) > len(cores):
            continue
        first = 0
        for address in addresses:
            width = workers[address]["nthreads"]
            assignment[address] = list(cores[first : first + width])
            first += width
    return assignment


def _pin_here(cores: list[int], dask_worker=None) -> int:
    return pin_process(set(cores))


def pin_shared_machines(client) -> dict[str, list[int]]:
    """Pin the cluster's workers that share a machine to cores of their own where they fit
    (:func:`core_assignment`); returns what was pinned. Best effort: a worker that does not
    answer is left as it is."""
    if not _pinning_wanted():
        return {}
    try:
        assignment = core_assignment(client.run(_where_am_i, on_error="ignore"), client=(_machine_id(), os.getpid()))
        for address, cores in assignment.items():
            client.run(_pin_here, cores, workers=[address], on_error="ignore")
    except Exception:  # a worker lost meanwhile: the run finds it
        return {}
    return assignment
