"""How often a replica snapshots its learners' state when the run left it to workbench.

On a cluster each replica sends the driver a snapshot of its learners' state as it enters an
iteration, so a lost worker costs at most the iteration in flight (:mod:`workbench.runtime.
snapshots`). For the quickstart's PPO that is ~1 ms against a 25 ms iteration. For a model
of a hundred million parameters it is not: GRPO's learner with a 113M-parameter Llama holds
the model, Adam's two moments and the reference weights, ~1.8 GB to pickle every iteration,
seconds of every iteration's critical path (and on a GPU, a device-to-host copy of all of it).

So, unless ``snapshot_every`` was given, a replica whose snapshots are big (at least
:data:`BIG_BYTES`) and slow (over :data:`FLOOR_S`) keeps them to about :data:`BUDGET` of its
iterations' time: after each one it sets its interval to the smallest power of two ``k``
with ``cost ≤ BUDGET × k × iteration time`` (at most :data:`MOST`), and snapshots at the
iterations that are multiples of ``k``. Smaller snapshots are taken every iteration, as
before, however long one of them happened to take (the size decides, not a busy machine's
timing, so a run of small states loses at most the iteration in flight, always). Powers of two keep replicas that
chose different intervals consistent without asking each other: the driver resumes from an
iteration every replica snapshotted, and multiples of the largest ``k`` are multiples of
every smaller one. A lost worker then costs at most the iterations since the last common
snapshot — a share of the run's time near ``BUDGET``, not more.

The first big snapshot sets the interval to :data:`MOST` until the iteration it began has
been timed, so a model of a hundred million parameters is pickled once up front, not twice.

Example:
    >>> pacer = SnapshotPacer(budget=0.05)
    >>> pacer.due(1, now=0.0)                       # nothing measured yet: snapshot
    True
    >>> pacer.took(0.2, size=1 << 30)               # 1 GiB in 0.2 s
    >>> [i for i in range(2, 12) if pacer.due(i, now=i - 0.8)]   # 1 s iterations: every 4th
    [4, 8]
"""
from __future__ import annotations

import time

__all__ = ["SnapshotPacer", "BUDGET", "MOST", "FLOOR_S", "BIG_BYTES"]

#: the share of an iteration's time that snapshots may take, on average
BUDGET = 0.05
#: snapshots smaller than this are taken every iteration (the quickstart's learner: ~150 KB)
BIG_BYTES = 16 * 1024 * 1024
#: and so are quicker ones, whatever their share of an iteration
FLOOR_S = 0.02
#: the longest interval, in iterations (the driver keeps this many of a replica's snapshots
#: and more: workbench.runtime.snapshots.SnapshotBook)
MOST = 32


class SnapshotPacer:
    """One replica's snapshot interval: ``due(i)`` as it enters iteration ``i``, then
    ``took(seconds)`` after each snapshot it sent."""

    def __init__(self, budget: float = BUDGET, most: int = MOST) -> None:
        self.budget, self.most = budget, most
        #: snapshot at the iterations that are multiples of this (a power of two)
        self.every = 1
        self._entered: float | None = None
        self._spent = 0.0  # snapshot seconds since the last iteration began
        self._cost: float | None = None  # the last big snapshot's seconds
        #: an iteration's own time, snapshots left out (a moving average)
        self.iteration_s: float | None = None

    def due(self, iteration: int, now: float | None = None) -> bool:
        """Whether to snapshot on entering ``iteration``."""
        now = time.perf_counter() if now is None else now
        if self._entered is not None:
            span = max(0.0, now - self._entered - self._spent)
            self.iteration_s = span if self.iteration_s is None else 0.7 * self.iteration_s + 0.3 * span
            if self._cost is not None:
                self.every = self._interval(self._cost)
        self._entered, self._spent = now, 0.0
        return iteration % self.every == 0

    def took(self, seconds: float, size: int | None = None) -> None:
        """A snapshot of ``size`` bytes took ``seconds``: set the interval that keeps them
        within the budget."""
        self._spent += seconds
        if seconds < FLOOR_S or (size is not None and size < BIG_BYTES):
            self._cost, self.every = None, 1
            return
        self._cost = seconds
        self.every = self._interval(seconds)

    def _interval(self, cost: float) -> int:
        """The smallest power of two ``k`` with ``cost ≤ budget × k × iteration time``
        (:data:`MOST` while no iteration has been timed: the next entry times one)."""
        wanted = cost / (self.budget * self.iteration_s) if self.iteration_s else float("inf")
        every = 1
        while every < wanted and every < self.most:
            every *= 2
        return every
