"""Telling a long iteration from a stalled run.

The driver hears from a replica when one of its tasks ends. Silence alone cannot tell a
run that is stuck (a cell waiting on an event that never comes, replicas waiting on each
other) from one working through a long iteration: PPO inline with 65,536 envs spends
minutes in one learner update and reports nothing meanwhile, and was declared stalled
after 30 s. So silence past the deadline is a stall only if, over the last window, no
replica made **progress** either:

- it **stepped**: each replica counts the steps its step loop finishes
  (``GroupReplica.steps_done``), a counter read in process and across processes alike;
- or its loop's thread **computed**: it used at least :data:`BUSY_SHARE` of one core
  (:func:`thread_cpu_seconds`). A cell that computes — a learner's update, a long env
  step — does; one that sleeps, waits on an event, a lock or another replica uses almost
  none (the waits poll a few times a second: a few tenths of a percent).

And the deadline grows with the run: :data:`STALL_FACTOR` × the longest time between two
recorded iterations, so a run whose iterations take minutes is not judged on 30 s even
where a cell waits on a device without using the CPU.

Example:
    >>> counts = {"learner[0]": (0, 1.0)}
    >>> dog = Watchdog(10.0, lambda: dict(counts), now=0.0)
    >>> dog.stalled(5.0) is None                     # half the deadline: a baseline is taken
    True
    >>> counts["learner[0]"] = (0, 5.0)              # 4 s of CPU in the next 5 s: working
    >>> dog.stalled(10.0) is None
    True
    >>> dog.stalled(15.0) is None, dog.stalled(20.0) # then nothing for a whole window
    (True, 'none of them stepped or computed in the last 10 s')
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

__all__ = ["Watchdog", "thread_cpu_seconds", "progressed", "BUSY_SHARE", "STALL_FACTOR"]

#: a loop thread that used this share of one core over the window was computing: a
#: starved one on a busy 2-core machine still gets far more; a waiting one, far less (one
#: polling a flag every 50 ms: 0.1–0.2 %, measured)
BUSY_SHARE = 0.02
#: the deadline is at least this many times the longest interval between iterations
STALL_FACTOR = 3.0

#: replica label → (steps finished, CPU seconds of its loop's thread or None)
Activity = dict[str, tuple[int, float | None]]


def thread_cpu_seconds(thread: threading.Thread | None) -> float | None:
    """CPU seconds ``thread`` has used, or None where that cannot be read (it ended, or
    the platform has no per-thread CPU clock).

    >>> thread_cpu_seconds(threading.current_thread()) is not None or sys.platform != "linux"
    True
    """
    if thread is None or not thread.is_alive():
        return None
    try:
        if sys.platform == "linux" and thread.native_id is not None:
            # the kernel's per-thread CPU clock by thread id (what pthread_getcpuclockid
            # computes): an ended thread's id gives EINVAL, never another thread's clock
            return time.clock_gettime((~thread.native_id << 3) | 6)
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return None


def progressed(before: Activity, after: Activity, window: float) -> bool:
    """Whether any replica stepped, or computed for ``BUSY_SHARE`` of ``window``, between
    two readings.

    >>> progressed({"a[0]": (3, 0.0)}, {"a[0]": (4, 0.0)}, 10.0)
    True
    >>> progressed({"a[0]": (3, 0.0)}, {"a[0]": (3, 0.01)}, 10.0)
    False
    """
    for label, (steps, cpu) in after.items():
        if label not in before:
            continue
        old_steps, old_cpu = before[label]
        if steps > old_steps:
            return True
        if cpu is not None and old_cpu is not None and cpu - old_cpu >= BUSY_SHARE * window:
            return True
    return False


class Watchdog:
    """Decides when the run's silence is a stall. ``activity()`` reads every replica's
    progress (None or raising: unknown, and then silence alone decides, as it used to)."""

    def __init__(
        self, stall_timeout: float, activity: Callable[[], Activity | None] | None, now: float | None = None
    ) -> None:
        self.stall_timeout = stall_timeout
        self._activity = activity
        now = time.monotonic() if now is None else now
        self._heard = self._progress = self._last_iteration = now
        self._longest = 0.0
        self._baseline: tuple[float, Activity] | None = None

    @property
    def deadline(self) -> float:
        """Seconds of silence without progress that make a stall."""
        return max(self.stall_timeout, STALL_FACTOR * self._longest)

    def heard(self, now: float) -> None:
        """A replica reported (or exited): the silence starts over."""
        self._heard = self._progress = now
        self._baseline = None

    def iteration_done(self, now: float) -> None:
        """An iteration was recorded: the deadline grows with the longest one."""
        self._longest = max(self._longest, now - self._last_iteration)
        self._last_iteration = now

    def silent_for(self, now: float) -> float:
        """Seconds since a replica last reported."""
        return now - self._heard

    def stalled(self, now: float) -> str | None:
        """None while the run may still be working; else what is known of why it is
        stalled (empty when only its silence is)."""
        quiet = now - self._progress
        if self._activity is not None and self._baseline is None and quiet >= self.deadline / 2:
            reading = self._read()
            if reading is not None:
                self._baseline = (now, reading)  # the window progress is judged over
                return None
        if quiet < self.deadline:
            return None
        if self._baseline is None:  # nothing known of the replicas' progress: silence decides
            return ""
        since, before = self._baseline
        reading = self._read()
        window = now - since
        if reading is not None and progressed(before, reading, window):
            self._progress, self._baseline = now, (now, reading)  # working: judge the next window
            return None
        return f"none of them stepped or computed in the last {window:.0f} s"

    def _read(self) -> Activity | None:
        try:
            return self._activity()
        except Exception:  # a worker that cannot be asked: silence alone decides
            return None
