"""A sweep in a background thread (``%fdg sweep --background``): ``%fdg stop`` stops it."""

from __future__ import annotations

import threading
from typing import Any

from workbench.sweep.result import SweepResult
from workbench.sweep.runner import SweepControl, sweep

__all__ = ["BackgroundSweep"]


class BackgroundSweep:
    """``sweep(fdg, **keywords)`` in a daemon thread; ``stop()`` ends it and returns its result.

    >>> job = BackgroundSweep(fdg, dict(seeds=10)); job.start()    # doctest: +SKIP
    >>> result = job.stop()                                        # doctest: +SKIP
    """

    def __init__(self, fdg, keywords: dict[str, Any]) -> None:
        self.control = SweepControl()
        self.result: SweepResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._sweep, args=(fdg, keywords), name="workbench-sweep", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _sweep(self, fdg, keywords: dict[str, Any]) -> None:
        try:
            self.result = sweep(fdg, control=self.control, **keywords)
        except BaseException as exc:  # noqa: BLE001 - said where it was started, kept for stop()
            self.error = exc
            print(f"workbench: the background sweep failed: {exc}", flush=True)

    def stop(self, timeout: float = 120.0) -> SweepResult | None:
        """Stop the running trials at their next boundary and return the result (finished
        trials kept); the sweep's error is raised again here if it failed."""
        self.control.stop()
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.result
