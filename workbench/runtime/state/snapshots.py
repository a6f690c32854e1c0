"""Snapshots: every replica's state between two iterations, kept by the driver while a run
goes, so that a lost worker costs at most the iteration in flight and checkpoints can be
written without stopping the run.

Each replica sends its pickled state as it enters iteration ``i`` (see
:func:`~workbench.runtime.replicas.loop.run_loop`); the driver's :class:`SnapshotBook` files them
(it speaks the mailbox's ``put``, so a channel server can fill it) and hands out the newest
iteration for which *every* replica has sent one. A replica sends its whole state (a
*full* snapshot, filed under ``snapshot_key(group, full=True)``) where a checkpoint is due;
the book says whether every one of an iteration's snapshots was full
(:class:`IterationSnapshots`), since replicas that pace their checkpoints alone
(:class:`~workbench.runtime.state.snapshot_pacing.CheckpointPacer`) may take one where another
took a light one, and a checkpoint must hold every fragment.

Example:
    >>> book = SnapshotBook({"learner": 1, "actor": 2})
    >>> for group, index in [("learner", 0), ("actor", 0), ("actor", 1)]:
    ...     book.put(snapshot_key(group), 4, index, b"...")
    >>> book.put(snapshot_key("learner"), 5, 0, b"...")
    >>> book.latest()[0]
    4
    >>> seen = []
    >>> book = SnapshotBook({"learner": 1, "actor": 1}, on_complete=lambda i, s: seen.append((i, s.full)))
    >>> for group, full in [("learner", True), ("actor", False)]:   # the actor's is light
    ...     book.put(snapshot_key(group, full), 8, 0, b"...")
    >>> for group in ["learner", "actor"]:
    ...     book.put(snapshot_key(group, full=True), 16, 0, b"...")
    >>> seen                                       # a checkpoint can be written from 16
    [(8, False), (16, True)]
"""

from __future__ import annotations

import threading

import pickle

from workbench.runtime.state.snapshot_pacing import MOST
from workbench.runtime.state.replica_state import RunState

__all__ = ["SnapshotBook", "IterationSnapshots", "snapshot_key", "state_from", "DRIVER"]

#: where replicas send snapshots: the driver's own mailbox, as a (group, replica) target
DRIVER = ("__driver__", 0)
_PREFIX = "snapshot:"
_FULL_PREFIX = "snapshot-full:"


def snapshot_key(group: str, full: bool = False) -> str:
    """The channel key of a snapshot of ``group``'s replicas: a light one (the learners)
    or a ``full`` one (every fragment: what a checkpoint holds)."""
    return (_FULL_PREFIX if full else _PREFIX) + group


class IterationSnapshots(dict):
    """Every replica's pickled snapshot of one iteration, ``(group, replica) → bytes``;
    ``full``: each of them holds every fragment, so a checkpoint can be written from them."""

    def __init__(self, snapshots: dict, full: bool) -> None:
        super().__init__(snapshots)
        self.full = full


class SnapshotBook:
    """Per replica, its last few snapshots (pickled bytes, decoded only when used)."""

    def __init__(self, counts: dict[str, int], keep: int = 64, on_complete=None) -> None:
        self.counts = dict(counts)
        #: at most this many snapshots per replica: a replica that runs ahead of the
        #: others (one that does not wait for them) keeps its newer ones until they catch up
        self.keep = keep
        #: called as ``on_complete(iteration, snapshots)`` (in the thread that filed the
        #: last one) when every replica has sent its snapshot of ``iteration``; ``snapshots``
        #: is an :class:`IterationSnapshots`
        self.on_complete = on_complete
        self._versions: dict[tuple[str, int], dict[int, bytes]] = {
            (g, i): {} for g, n in counts.items() for i in range(n)
        }
        #: per replica, the iterations of its snapshots that were full
        self._full: dict[tuple[str, int], set[int]] = {key: set() for key in self._versions}
        self._lock = threading.Lock()
        #: the first iteration the driver has not recorded yet (None: no limit). Snapshots
        #: past it are not handed out: a worker lost mid-iteration can take the reports
        #: of an iteration with it after every replica's next snapshot arrived, and
        #: resuming there would skip that iteration
        self.limit: int | None = None

    def settle(self, iteration: int) -> None:
        """The driver has recorded every iteration before ``iteration``."""
        with self._lock:
            self.limit = iteration

    def put(self, key: str, task: int, replica: int, value: bytes) -> None:
        """A snapshot of replica ``replica`` of the group in ``key``, at iteration ``task``."""
        full = key.startswith(_FULL_PREFIX)
        group = key[len(_FULL_PREFIX if full else _PREFIX) :]
        with self._lock:
            versions = self._versions.setdefault((group, replica), {})
            fulls = self._full.setdefault((group, replica), set())
            versions[task] = value
            (fulls.add if full else fulls.discard)(task)
            for old in _beyond_keeping(versions, self.keep):
                del versions[old]
                fulls.discard(old)
            complete = all(task in v for v in self._versions.values())
            if complete:
                pickled = IterationSnapshots(
                    {k: v[task] for k, v in self._versions.items()}, full=all(task in f for f in self._full.values())
                )
                usable = self._newest_complete()
                for k, v in self._versions.items():  # older ones can never be used now
                    for old in [t for t in v if usable is not None and t < usable]:
                        del v[old]
                        self._full[k].discard(old)
        if complete and self.on_complete is not None:
            self.on_complete(task, pickled)

    def _newest_complete(self) -> int | None:
        """(Under the lock) the newest iteration, not past ``limit``, every replica has."""
        common = None
        for versions in self._versions.values():
            common = set(versions) if common is None else common & set(versions)
        usable = [t for t in common or () if self.limit is None or t <= self.limit]
        return max(usable) if usable else None

    def latest(self) -> tuple[int, dict[tuple[str, int], bytes]] | None:
        """The newest iteration every replica has a snapshot of (not past ``limit``), with
        those snapshots."""
        with self._lock:
            iteration = self._newest_complete()
            if iteration is None:
                return None
            return iteration, {key: versions[iteration] for key, versions in self._versions.items()}

    def at(self, iteration: int) -> dict[tuple[str, int], bytes] | None:
        """Every replica's snapshot at ``iteration``, if all of them have one."""
        with self._lock:
            if all(iteration in v for v in self._versions.values()):
                return {key: v[iteration] for key, v in self._versions.items()}
            return None


def _beyond_keeping(versions, keep: int) -> list[int]:
    """The iterations of a replica's snapshots to drop: all but its ``keep`` newest and its
    newest at a multiple of each power of two (up to ``MOST``). A replica that snapshots
    every iteration so still holds the one a replica with a longer interval (a big
    learner's, :mod:`workbench.runtime.state.snapshot_pacing`) took at the same iteration.

    >>> _beyond_keeping(dict.fromkeys(range(1, 11)), 2)   # kept: 9, 10, and 8 (a multiple of 8)
    [1, 2, 3, 4, 5, 6, 7]
    """
    newest = sorted(versions)
    kept = set(newest[-keep:])
    power = 2
    while power <= MOST:
        multiples = [i for i in newest if i % power == 0]
        if multiples:
            kept.add(multiples[-1])
        power *= 2
    return [i for i in newest if i not in kept]


def state_from(plan, iteration: int, pickled: dict[tuple[str, int], bytes]) -> RunState:
    """The :class:`RunState` that one iteration's snapshots of a plan's replicas make."""
    fragments: dict[str, list] = {}
    for name, group in plan.groups.items():
        replicas = [pickle.loads(pickled[(name, i)]) for i in range(group.replicas)]
        for frag in group.fragments:
            if all(frag in r for r in replicas):  # a light snapshot holds only the learners
                fragments[frag] = [r[frag] for r in replicas]
    stepping = frozenset(n for n, f in plan.fdg.fragments.items() if "step" in f.cells)
    return RunState(iteration, fragments, stepping)
