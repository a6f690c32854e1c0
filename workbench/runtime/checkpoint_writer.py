"""Checkpoints written while a run trains, off the training thread.

The replicas' full snapshots arrive every ``every`` iterations; a background thread turns
each into a checkpoint directory, so training never waits for the disk. A write that fails
is reported once, at the end of the run, as a :class:`~workbench.errors.CheckpointError`.
"""
from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from workbench.errors import CheckpointError

if TYPE_CHECKING:
    from workbench.fdg.plan import Plan
    from workbench.fdg.policy import Policy
    from workbench.runtime.run import Run

__all__ = ["CheckpointWriter"]


class CheckpointWriter:
    """Writes a checkpoint every ``every`` iterations from the replicas' snapshots, in a
    background thread, and one at the end (:meth:`final`)."""

    def __init__(self, run: "Run", directory: str | None, every: int | None) -> None:
        self.run, self.directory = run, directory
        self.enabled = directory is not None
        self.every = every or 0
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def stretch(self, plan: "Plan", policy: "Policy"):
        """The ``on_snapshot`` hook for one stretch: queue each due checkpoint."""
        if not self.every:
            return None

        def on_snapshot(iteration: int, pickled: dict) -> None:
            if iteration % self.every == 0:
                self._queue((plan, iteration, pickled, policy))

        return on_snapshot

    def _queue(self, job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="workbench-checkpoints", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _work(self) -> None:
        from workbench.runtime.checkpoint import save_checkpoint
        from workbench.runtime.snapshots import state_from

        while True:
            job = self._jobs.get()
            if job is None:
                return
            plan, iteration, pickled, policy = job
            try:
                state = state_from(plan, iteration, pickled)
                written = save_checkpoint(self.directory, state, self.run.fdg, policy,
                                          warn=lambda text: self.run.note_once("state not saved", text))
                self.run.checkpoints.append(str(written))
            except BaseException as exc:  # reported once, at the end; training goes on
                self.error = exc

    def final(self) -> None:
        """The run ended: write its final state (after the queued ones)."""
        self.close()
        if self.error is not None:
            raise CheckpointError(f"writing a checkpoint to {self.directory} failed: {self.error}") \
                from self.error
        if self.enabled and self.run.state is not None:
            self.run.checkpoint(self.directory)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
