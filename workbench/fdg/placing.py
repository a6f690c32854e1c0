"""Where presets put replicas: round-robin spreads, the learner's home worker, and the
checks of the counts a preset is given. Plain functions of an :class:`Inventory`.

Example:
    >>> _spread(("a", "b"), 3)
    ('a', 'b', 'a')
"""

from __future__ import annotations

import json

from workbench.fdg.vocabulary import whole_number
from workbench.fdg.errors import PlacementError
from workbench.fdg.inventory import Inventory, WorkerInfo

__all__ = ["_whole", "_spread", "_home", "_check_count", "_env_workers"]


def _whole(replicas):
    """A JSON replica count as it is: 2.7 or true must not quietly become 2 or 1."""
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise TypeError(f"replicas must be a whole number ≥ 1, got {json.dumps(replicas)}")
    return replicas


def _spread(names: tuple[str, ...], count: int) -> tuple[str, ...]:
    """``count`` replicas round-robin over ``names``."""
    return tuple(names[i % len(names)] for i in range(count))


def _home(inventory: Inventory) -> WorkerInfo:
    """Where the single learner goes: a GPU worker if there is one, else the first worker."""
    if not inventory.workers:
        raise PlacementError("this policy needs a cluster with at least one worker.")
    return (inventory.gpu_workers() or inventory.workers)[0]


def _check_count(preset: str, parameter: str, value) -> int | None:
    """A preset's count (``actors``, ``envs``, ``learners``) as a plain int, or None."""
    count = whole_number(value)
    if value is not None and (count is None or count < 1):
        raise PlacementError(f"{preset}({parameter}=…) must be a whole number ≥ 1, got {value!r}.")
    return count


def _env_workers(inventory: Inventory, home: WorkerInfo, count: int) -> tuple[str, ...]:
    """Where SingleLearnerFine's ``count`` env replicas go: round-robin over the workers
    other than ``home`` (the learner's), then ``home`` itself, so the replicas per worker
    differ by at most one. Up to one per other worker, that is the other workers alone.

    Why ``home`` takes a share rather than none: each step the actor waits for every env
    replica, so it idles while they step; but two env replicas in one process take turns
    (one cell at a time, for per-replica random streams: workbench.runtime.state.randomness), so
    a worker holding two makes every step last two env steps. ``envs=W`` on W workers put
    two on one worker and ran at 52 % of W × the 1-worker rate (docs/performance.md).

        >>> from workbench.fdg.inventory import Inventory, WorkerInfo
        >>> inv = Inventory(tuple(WorkerInfo(f"tcp://w{i}", str(i)) for i in range(3)))
        >>> _env_workers(inv, inv.workers[0], 2), _env_workers(inv, inv.workers[0], 4)
        (('1', '2'), ('1', '2', '0', '1'))
    """
    others = tuple(w.name for w in inventory.workers if w.name != home.name)
    return _spread(others + (home.name,), count)
