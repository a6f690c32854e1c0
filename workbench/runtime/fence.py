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

    @property
    def boundary(self) -> int | None:
        """The iteration the replicas stop before (None until closed)."""
        return self._boundary

    def enter(self, replica, iteration: int, stopped: Callable[[], bool]) -> bool:
        """May ``replica`` begin ``iteration``? Waits while the fence is paused; False once
        the iteration is at or past the boundary (the replica's loop then ends)."""
        with self._cond:
            while self._paused and not stopped():
                self._cond.wait(0.05)
            if self._boundary is not None and iteration >= self._boundary:
                return False
            self._begun[replica] = iteration
            return True

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
