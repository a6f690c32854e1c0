"""The notebook's background run (``%fdg run --background``): its thread and its record.

The record is kept here, apart from ``fdg.last_run``, because a later foreground run
replaces that: ``%fdg stop`` must still answer for the background run, and a failed one's
error must still be reachable, however many runs came after it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from workbench.errors import FragmentRuntimeError, WorkbenchError
from workbench.runtime.engine.driver import STOP_GRACE_S

if TYPE_CHECKING:
    from workbench.runtime.state.run import Run
    from workbench.session import FDG

__all__ = ["BackgroundRun", "RECORD_WAIT_S"]

#: how long starting a background run waits for its record (made by the run's checks)
RECORD_WAIT_S = 5.0


class BackgroundRun:
    """One ``fdg.run(**options)`` in a daemon thread.

    >>> job = BackgroundRun(fdg, dict(iterations=100))      # doctest: +SKIP
    >>> run = job.start()          # the record, live        # doctest: +SKIP
    >>> run is job.stop()                                   # doctest: +SKIP
    True
    """

    def __init__(self, fdg: FDG, options: dict) -> None:
        self.fdg = fdg
        #: the run's record once the thread has ended (None while it trains, or for a run
        #: refused before it had one: then ``error`` says why)
        self.record: Run | None = None
        self.error: BaseException | None = None
        #: its failure was said in a later cell, or its record returned: said no more
        self.looked_at = False
        self._thread = threading.Thread(target=self._train, kwargs=options, name="workbench-run", daemon=True)

    def start(self, wait: float = RECORD_WAIT_S) -> Run | None:
        """Start training; return the run's record, live (it fills in as the run trains),
        as soon as the run has one. None for a run refused before it had one (``error``
        says why), or one still without a record after ``wait`` seconds."""
        before = self.fdg.last_run
        self._thread.start()
        deadline = time.monotonic() + wait
        while self.alive and self.fdg.last_run is before and time.monotonic() < deadline:
            self._thread.join(timeout=0.01)  # its checks come first: quick
        run = self.fdg.last_run
        return run if run is not before else self.record

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _train(self, **options) -> None:
        """The error is said in one line where the run was started (the whole error,
        traceback included, stays in the record: ``%fdg stop`` returns it)."""
        before = self.fdg.last_run
        try:
            self.record = self.fdg.run(**options)
        except BaseException as exc:  # noqa: BLE001 — a thread must not die with a raw traceback
            after = self.fdg.last_run
            # a run refused before training (its checks, its cluster) leaves last_run as it was
            self.record = after if after is not before else None
            self.error = exc
            text = str(exc) if isinstance(exc, WorkbenchError) else f"{type(exc).__name__}: {exc}"
            print(f"workbench: the background run failed: {text}", flush=True)

    def stop(self) -> Run | None:
        """Stop the run after its current iteration and return its record; None (said in a
        line) when it has not stopped in time. A stuck cell costs the run's grace (named when
        it passes) and a worker restart; the stop is asked again while it lasts, so a thread
        that has yet to call ``fdg.run`` gets it too."""
        deadline = time.monotonic() + 3 * STOP_GRACE_S + 60
        while self.alive and time.monotonic() < deadline:
            self.fdg.stop()
            self._thread.join(timeout=0.05)
        if self.alive:
            print(
                "workbench: the run has not stopped yet; it goes on stopping in the background "
                "(%fdg stop again to wait for it)."
            )
            return None
        return self.record

    def ended_line(self) -> str:
        """What ``%fdg stop`` says of a run that had ended before it was asked."""
        record, failure = self.record, self._failure()
        if failure is None:
            return f"nothing is running: the background run ended by itself ({record.summary()}); returning its record."
        if record is None:  # refused before it had a record: there is none to return
            return f"nothing is running: the background run failed before it started ({_brief(failure)})."
        return (
            f"nothing is running: the background run failed at iteration {self._failed_at()} "
            f"({_brief(failure)}); returning its record (run.error has why)."
        )

    def failure_notice(self, *, starting: bool = False) -> str | None:
        """One line, said once, for a background run that failed and was never looked at:
        the cell that started it (which said so) may be far up the notebook. ``starting``:
        a new background run is starting, and ``%fdg stop`` will answer for that one."""
        failure = self._failure()
        if self.alive or self.looked_at or failure is None:
            return None
        self.looked_at = True
        if self.record is None:
            return f"workbench: the background run failed before it started ({_brief(failure)})."
        # a new background run takes over %fdg stop: the start cell's line is then the way to why
        see = (
            "the cell that started it has the whole error (%fdg stop answers for the new run)"
            if starting
            else "%fdg stop returns its record (run.error has why)"
        )
        return f"workbench: the background run failed at iteration {self._failed_at()} ({_brief(failure)}); {see}."

    def _failure(self) -> BaseException | None:
        if self.alive:
            return None
        if self.record is not None:
            return self.record.error if self.record.status == "failed" else None
        return self.error

    def _failed_at(self) -> int:
        # the iteration the error names (a cell's), else the first one that did not finish
        at = getattr(self.record.error, "iteration", None)
        return at if isinstance(at, int) else self.record.completed_iterations


def _brief(error: BaseException) -> str:
    """The error in a few words: what raised it, not its whole text (the record has that)."""
    if isinstance(error, FragmentRuntimeError):
        text = f"fragment {error.fragment!r} raised {error.error}"
    else:
        said = str(error).strip()
        text = f"{type(error).__name__}: {said}" if said else type(error).__name__
    text = text.splitlines()[0]
    return text if len(text) <= 120 else text[:119] + "…"
