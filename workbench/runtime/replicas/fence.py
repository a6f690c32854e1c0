"""An exact iteration boundary for a running run: where every replica stops together.

Replicas run ahead of the driver (a learner may already learn on iteration ``i`` while the
driver records ``i - 2``), so "stop after the iteration the driver just saw" would leave
their states at different iterations. A fence makes the boundary exact, in two phases:

1. **pause**: no replica may begin a new iteration (one in the middle of a task finishes it);
2. **close at B**: ``B`` is one past the newest iteration any replica has begun; every
   replica runs every iteration before ``B`` — nothing begun is thrown away — and stops
   before ``B``.

The state then collected is every fragment's state between iterations ``B - 1`` and ``B``,
so a re-placement, a hot edit or a new value applied there continues the run exactly as
if nothing had happened (for synchronous policies).

One fence serves the replicas of one process (the notebook's for inline runs, each
worker's on a cluster); :func:`decide` closes several at one boundary.

**Lockstep** (a run with a ``target_return``): a gated fence lets no replica begin an
iteration until the driver has recorded the one before and released it
(:meth:`Fence.release`), so a stop decided on iteration ``i`` closes at ``i + 1``
exactly — no replica, however far it could run ahead (actors that read nothing from the
learner), has begun ``i + 1``. Every other synchronous run is gated too, with a window:
the driver releases a few iterations past the newest it recorded
(:data:`~workbench.runtime.engine.driver.LOOKAHEAD`), so such actors stay within it, and a stop
closes there, not at the run's end.

Example:
    >>> fence = Fence()
    >>> fence.enter(("env", 0), 0, lambda: False), fence.enter(("env", 0), 1, lambda: False)
    (True, True)
    >>> decide([fence], at_least=1)
    2
    >>> fence.enter(("env", 0), 2, lambda: False)   # the boundary: stop before iteration 2
    False
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

__all__ = ["Fence", "decide"]


class Fence:
    """The replicas of one process ask it before they begin each iteration."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._boundary: int | None = None
        self._begun: dict = {}
        #: gated: the newest iteration the driver lets begin (None: not gated)
        self._released: int | None = None

    @property
    def boundary(self) -> int | None:
        """The iteration the replicas stop before (None until closed)."""
        return self._boundary

    def enter(self, replica, iteration: int, stopped: Callable[[], bool]) -> bool:
        """May ``replica`` begin ``iteration``? Waits while the fence is paused; False once
        the iteration is at or past the boundary (the replica's loop then ends)."""
        with self._cond:
            while (self._paused or self._held(iteration)) and not stopped():
                self._cond.wait(0.05)
            if self._boundary is not None and iteration >= self._boundary:
                return False
            self._begun[replica] = iteration
            return True

    def _held(self, iteration: int) -> bool:
        """Gated, ``iteration`` not released yet, and no boundary: once closed, every
        iteration before the boundary runs (as the boundary promised, whatever this
        process had been released) and every one past it ends the loop."""
        return self._released is not None and self._boundary is None and iteration > self._released

    def gate(self, first: int) -> None:
        """Lockstep: from now on an iteration past ``first`` waits for :meth:`release`
        (once per process: a later call, or one after a release, changes nothing)."""
        with self._cond:
            if self._released is None:
                self._released = first

    def release(self, iteration: int) -> None:
        """The replicas may begin every iteration up to ``iteration``; on a fence not gated
        yet, it gates it there (the window released before the loops start)."""
        with self._cond:
            self._released = max(iteration, -1 if self._released is None else self._released)
            self._cond.notify_all()

    def pause(self) -> int:
        """Phase 1: hold every replica before its next iteration; return the newest
        iteration begun here (-1 for none)."""
        with self._cond:
            self._paused = True
            return max(self._begun.values(), default=-1)

    def close_at(self, boundary: int) -> None:
        """Phase 2: let the replicas run every iteration before ``boundary``, then stop."""
        with self._cond:
            self._boundary = boundary
            self._paused = False
            self._cond.notify_all()


def decide(fences: Iterable[Fence], at_least: int) -> int:
    """Pause every fence, close them all at one boundary (≥ ``at_least``) and return it."""
    fences = list(fences)
    newest = max((fence.pause() for fence in fences), default=-1)
    boundary = max(newest + 1, at_least)
    for fence in fences:
        fence.close_at(boundary)
    return boundary
