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
iterations that are multiples of ``k``. Smaller snapshots are taken every iteration,
however long one of them happened to take (one busy moment decides nothing, so a run of
small states loses at most the iteration in flight) — unless the state is at least
:data:`SMALL_PACED_BYTES` and the median of its last few costs :data:`SMALL_FLOOR_S` or
more: then they keep to the budget too, within
:data:`SMALL_MOST` iterations (a lost worker costs at most that many; a GRPO learner's
small model object pickles in ~6 ms against a 30 ms iteration). Powers of two keep replicas that
chose different intervals consistent without asking each other: the driver resumes from an
iteration every replica snapshotted, and multiples of the largest ``k`` are multiples of
every smaller one. A lost worker then costs at most the iterations since the last common
snapshot — a share of the run's time near ``BUDGET``, not more.

Nor is the first big snapshot taken blind. Given ``estimate`` (the state's bytes, its arrays
counted, not copied: :func:`~workbench.runtime.state.state_size.state_nbytes`), a state of at
least :data:`BIG_BYTES` is costed at :data:`ASSUMED_BYTES_PER_S` until a snapshot measures it,
and waits for an iteration to be timed: on one H200 host a 40-iteration GRPO run of that
113M model spent 12 of its 28 s in two snapshots (the first, blind, at iteration 1; the next
at :data:`MOST` = 32, as it was then), where its iterations took 0.16 s; costed first, the
interval is 512 and a run that short takes none. The assumed rate is on the quick side of
what was seen (0.2–0.4 GB/s through pickling and a socket), so a guess errs towards a
snapshot too early, which then measures the real cost. Without ``estimate``, the first big
snapshot sets the interval to :data:`MOST` until the iteration it began has been timed.

**Checkpoints** are paced the same way when the run gave ``checkpoint_dir`` and no
``checkpoint_every`` (:class:`CheckpointPacer`): a replica takes its full snapshot, the one
a checkpoint is written from, at the multiples of the largest power of two ``k`` with
``k × iteration time ≤`` :data:`CHECKPOINT_PERIOD_S`, raised to keep within the same
budget — so every 5–10 s of training, however many iterations the run plans (a run of
400 wrote its only checkpoint at its end: ``checkpoint_every`` had no default), and a big
state's checkpoints keep to :data:`BUDGET` of the time. The driver writes a checkpoint from an
iteration only when every replica sent its full state for it
(:class:`~workbench.runtime.state.snapshots.SnapshotBook`).

Example:
    >>> pacer = SnapshotPacer(budget=0.05)
    >>> pacer.due(1, now=0.0)                       # nothing measured yet: snapshot
    True
    >>> pacer.took(0.2, size=1 << 30)               # 1 GiB in 0.2 s
    >>> [i for i in range(2, 12) if pacer.due(i, now=i - 0.8)]   # 1 s iterations: every 4th
    [4, 8]
    >>> costed = SnapshotPacer(estimate=lambda: 1 << 30)   # 1 GiB, costed at ~1 s
    >>> [i for i in range(1, 80) if costed.due(i, now=float(i))]   # 1 s iterations: every 32nd
    [32, 64]
    >>> checkpoints = CheckpointPacer()               # within 10 s at 1 s an iteration: every 8th
    >>> [i for i in range(1, 30) if checkpoints.due(i, now=float(i))]
    [8, 16, 24]
"""

from __future__ import annotations

import time
from collections import deque
from statistics import median

__all__ = [
    "SnapshotPacer",
    "CheckpointPacer",
    "BUDGET",
    "MOST",
    "FLOOR_S",
    "BIG_BYTES",
    "ASSUMED_BYTES_PER_S",
    "SMALL_PACED_BYTES",
    "SMALL_SEEN",
    "SMALL_FLOOR_S",
    "SMALL_MOST",
    "CHECKPOINT_PERIOD_S",
    "PACED",
]

#: the share of an iteration's time that snapshots may take, on average
BUDGET = 0.05
#: snapshots smaller than this are taken every iteration (the quickstart's learner: ~150 KB)
BIG_BYTES = 16 * 1024 * 1024
#: and so are quicker ones, whatever their share of an iteration
FLOOR_S = 0.02
#: the longest interval, in iterations (the driver keeps a replica's newest snapshot at a
#: multiple of each power of two up to this: workbench.runtime.state.snapshots.SnapshotBook)
MOST = 4096
#: what a big state's snapshot is costed at before one has been timed (bytes a second)
ASSUMED_BYTES_PER_S = 1e9
#: a small state's snapshots pace only when it is at least SMALL_PACED_BYTES and once
#: SMALL_SEEN were timed, their median at least SMALL_FLOOR_S (a GRPO learner's 2 MB, its
#: model object, pickles in ~6 ms, 20 % of a 30 ms iteration; a PPO learner's 150 KB in ~1 ms,
#: more on a busy machine, and is never paced), and then within SMALL_MOST iterations
SMALL_PACED_BYTES, SMALL_SEEN, SMALL_FLOOR_S, SMALL_MOST = 1 << 20, 3, 0.002, 8
#: with checkpoint_dir and no checkpoint_every: a checkpoint at least this often, in seconds
#: of training, and at most twice as often (a lost kernel costs at most this much of it; a
#: small state's checkpoint costs milliseconds, a big one's at most the budget's share)
CHECKPOINT_PERIOD_S = 10.0
#: ``full_snapshot_every`` = PACED: the replicas' full snapshots (a checkpoint's) follow
#: :class:`CheckpointPacer` instead of a fixed interval
PACED = -1
#: a checkpoint interval is chosen once CHECKPOINT_TIMED iterations were timed, from the
#: median of the last few (a first iteration's warm-up decides nothing), and kept while it is
#: within CHECKPOINT_SLACK of the rule, so that replicas whose clocks differ a little agree
CHECKPOINT_TIMED, CHECKPOINT_SLACK = 3, 1.25


class SnapshotPacer:
    """One replica's snapshot interval: ``due(i)`` as it enters iteration ``i``, then
    ``took(seconds)`` after each snapshot it sent."""

    def __init__(self, budget: float = BUDGET, most: int = MOST, estimate=None) -> None:
        self.budget, self.most = budget, most
        #: ``estimate()``: the state's bytes, asked once before the first snapshot
        self._estimate = estimate
        #: snapshot at the iterations that are multiples of this (a power of two)
        self.every = 1
        self._entered: float | None = None
        self._spent = 0.0  # snapshot seconds since the last iteration began
        self._cost: float | None = None  # the last big snapshot's seconds
        #: an iteration's own time, snapshots left out (a moving average)
        self.iteration_s: float | None = None
        #: the last small snapshots' seconds (cleared by a big one): while they pace, within SMALL_MOST
        self._small: deque[float] = deque(maxlen=SMALL_SEEN + 2)

    def due(self, iteration: int, now: float | None = None) -> bool:
        """Whether to snapshot on entering ``iteration``."""
        if self._estimate is not None:  # once, before its time counts into an iteration's
            self._cost_from_size(self._estimate())
            self._estimate = None
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
            # small: every iteration, unless the last few cost SMALL_FLOOR_S or more each
            # (the median: one busy moment decides nothing), then within SMALL_MOST
            self._small.append(seconds)
            typical = sorted(self._small)[len(self._small) // 2]
            # the size first: a PPO learner's 150 KB is never paced, however busy the machine
            paced = (
                size is not None
                and size >= SMALL_PACED_BYTES
                and len(self._small) >= SMALL_SEEN
                and typical >= SMALL_FLOOR_S
            )
            self._cost = typical if paced else None
            self.every = self._interval(typical) if paced else 1
            return
        self._small.clear()
        self._cost = seconds
        self.every = self._interval(seconds)

    def _cost_from_size(self, nbytes: int | None) -> None:
        if nbytes is not None and nbytes >= BIG_BYTES:
            self._cost = nbytes / ASSUMED_BYTES_PER_S
            self.every = self._interval(self._cost)  # MOST until an iteration is timed

    def _interval(self, cost: float) -> int:
        """The smallest power of two ``k`` with ``cost ≤ budget × k × iteration time``
        (:data:`MOST` while no iteration has been timed: the next entry times one)."""
        wanted = cost / (self.budget * self.iteration_s) if self.iteration_s else float("inf")
        every = 1
        most = min(self.most, SMALL_MOST) if self._small else self.most
        while every < wanted and every < most:
            every *= 2
        return every


class CheckpointPacer:
    """One replica's checkpoint interval when the run gave no ``checkpoint_every``:
    ``due(i)`` as it enters iteration ``i``, then ``took(seconds)`` after each full
    snapshot it sent.

    Its interval is the largest power of two ``k`` with ``k × iteration time ≤ period``
    (1 if none), raised while ``cost > budget × k × iteration time`` (at most ``most``);
    none is due until :data:`CHECKPOINT_TIMED` iterations were timed. So checkpoints come
    every ``period / 2`` to ``period`` seconds — sooner than ``period``, not later, since
    the rounding to a power of two is down — unless their cost asks for fewer. The run's
    planned length plays no part: the first comes as soon in a run of 400 iterations as
    in one of 40,000. Powers of two let replicas choose alone, as :class:`SnapshotPacer`'s
    do: multiples of the largest ``k`` are multiples of each.

    >>> pacer = CheckpointPacer(period=10.0)
    >>> [pacer.due(i, now=0.03 * i) for i in range(1, 5)], pacer.every   # 30 ms: 256 is 7.7 s
    ([False, False, False, False], 256)
    >>> pacer.took(2.0)                          # a 2 s snapshot: 5 % of 1333 iterations' time
    >>> pacer.due(5, now=0.15 + 2.0), pacer.every
    (False, 2048)
    """

    def __init__(
        self, period: float | None = None, budget: float | None = None, most: int = MOST, estimate=None
    ) -> None:
        # the module's values read now, not at import: a test may set them for a run
        self.period = CHECKPOINT_PERIOD_S if period is None else period
        self.budget = BUDGET if budget is None else budget
        self.most = most
        #: ``estimate()``: the full state's bytes, asked once before the first snapshot
        self._estimate = estimate
        #: full snapshots at the multiples of this (a power of two); None: not timed yet
        self.every: int | None = None
        self._spans: deque[float] = deque(maxlen=CHECKPOINT_TIMED + 2)  # iterations' own seconds
        self._entered: float | None = None
        self._spent = 0.0  # snapshot seconds since the last iteration began
        self._cost = 0.0  # a full snapshot's seconds: the last one's, or costed from its size

    def due(self, iteration: int, now: float | None = None) -> bool:
        """Whether to take the full snapshot a checkpoint is written from on entering
        ``iteration``."""
        if self._estimate is not None:  # once, before its time counts into an iteration's
            nbytes, self._estimate = self._estimate(), None
            self._cost = (nbytes or 0) / ASSUMED_BYTES_PER_S
        now = time.perf_counter() if now is None else now
        if self._entered is not None:
            self._spans.append(max(0.0, now - self._entered - self._spent))
        self._entered, self._spent = now, 0.0
        if len(self._spans) >= CHECKPOINT_TIMED:
            self._settle(median(self._spans))
        return self.every is not None and iteration % self.every == 0

    def took(self, seconds: float) -> None:
        """A full snapshot took ``seconds``: its cost from now on."""
        self._spent += seconds
        self._cost = seconds

    def _settle(self, iteration_s: float) -> None:
        # kept while the rule, loosened or tightened by the slack, still allows it: noise
        # around a threshold never flips a replica between k and 2k (nor apart from the others)
        loose, tight = self._interval(iteration_s, 1 / CHECKPOINT_SLACK), self._interval(iteration_s, CHECKPOINT_SLACK)
        if self.every is None or not loose <= self.every <= tight:
            self.every = self._interval(iteration_s, 1.0)

    def _interval(self, iteration_s: float, slack: float) -> int:
        """The largest power of two ``k`` with ``k × iteration_s ≤ slack × period`` (at
        least 1), doubled while ``slack × cost > budget × k × iteration_s``; at most ``most``."""
        if iteration_s <= 0:
            return self.most
        every = 1
        while 2 * every * iteration_s <= slack * self.period and every < self.most:
            every *= 2
        while slack * self._cost > self.budget * every * iteration_s and every < self.most:
            every *= 2
        return every
