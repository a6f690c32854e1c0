"""What a cluster offers: its workers and their devices, as plain data.

The cluster layer builds an :class:`Inventory` from the Dask scheduler; policies and the
plan generator read it, so both can be tested with a hand-written inventory.

Example:
    >>> inv = Inventory((WorkerInfo("tcp://127.0.0.1:4001", "w0", nthreads=1),))
    >>> inv.names
    ('w0',)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkerInfo", "Inventory"]


@dataclass(frozen=True)
class WorkerInfo:
    """One Dask worker: where it is, its CPU threads and how many GPUs it has."""

    address: str
    name: str
    nthreads: int = 1
    gpus: int = 0
    memory_limit: int = 0


@dataclass(frozen=True)
class Inventory:
    """The workers a plan may use, in a stable order (sorted by name)."""

    workers: tuple[WorkerInfo, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.workers)

    def find(self, key: str) -> WorkerInfo | None:
        """A worker by name or address."""
        for worker in self.workers:
            if key in (worker.name, worker.address):
                return worker
        return None

    def gpu_workers(self) -> tuple[WorkerInfo, ...]:
        return tuple(w for w in self.workers if w.gpus > 0)

    def __len__(self) -> int:
        return len(self.workers)
