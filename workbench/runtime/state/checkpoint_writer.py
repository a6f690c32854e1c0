"""Checkpoints written while a run trains, off the training thread.

The replicas' full snapshots arrive every ``every`` iterations — or, given a directory and
no ``every``, every 5–10 s of training, however long the run is planned
(:class:`~workbench.runtime.state.snapshot_pacing.CheckpointPacer`; such a run used to write its
only checkpoint at its end, so a long one had none on disk while it trained); a background
thread turns each into a checkpoint directory, so training never waits for the disk. A
write that fails is reported once, at the end of the run, as a
:class:`~workbench.errors.CheckpointError`.

Example:
    >>> CheckpointWriter(None, "ckpt", 20).every, CheckpointWriter(None, "ckpt", None).every == PACED
    (20, True)
    >>> CheckpointWriter(None, None, None).every   # no directory: none while training
    0
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from workbench.errors import CheckpointError
from workbench.runtime.state.snapshot_pacing import PACED

if TYPE_CHECKING:
    from workbench.fdg.plan import Plan
    from workbench.fdg.policy import Policy
    from workbench.runtime.state.run import Run
    from workbench.runtime.state.snapshots import IterationSnapshots

__all__ = ["CheckpointWriter"]


class CheckpointWriter:
    """Writes a checkpoint every ``every`` iterations from the replicas' snapshots (paced,
    without ``every``), in a background thread, and one at the end (:meth:`final`)."""

    def __init__(self, run: "Run", directory: str | None, every: int | None) -> None:
        self.run, self.directory = run, directory
        self.enabled = directory is not None
        #: the replicas' ``full_snapshot_every``: as given, PACED for a directory alone (a
        #: user who names one expects checkpoints while it trains), 0 without a directory
        self.every = every or (PACED if self.enabled else 0)
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def stretch(self, plan: "Plan", policy: "Policy", clip_every: int = 0):
        """The ``on_snapshot`` hook for one stretch: queue each due checkpoint. ``clip_every``:
        the run's clips also take full snapshots, every this many iterations; those are not
        checkpoints, unless one is due there too."""
        if not self.every:
            return None

        def on_snapshot(iteration: int, pickled: "IterationSnapshots") -> None:
            # only where every replica sent its whole state: replicas that pace their
            # checkpoints alone may disagree at an iteration, and light ones lack the envs
            if not pickled.full:
                return
            for_a_clip = bool(clip_every) and iteration % clip_every == 0
            due = iteration % self.every == 0 if self.every != PACED else not for_a_clip
            if due:
                self._queue((plan, iteration, pickled, policy))

        return on_snapshot

    def _queue(self, job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="workbench-checkpoints", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _work(self) -> None:
        from workbench.runtime.state.checkpoint import save_checkpoint
        from workbench.runtime.state.snapshots import state_from

        while True:
            job = self._jobs.get()
            if job is None:
                return
            plan, iteration, pickled, policy = job
            try:
                state = state_from(plan, iteration, pickled)
                written = save_checkpoint(
                    self.directory,
                    state,
                    self.run.fdg,
                    policy,
                    warn=lambda text: self.run.note_once("state not saved", text),
                )
                self.run.checkpoints.append(str(written))
            except BaseException as exc:  # reported once, at the end; training goes on
                self.error = exc

    def final(self) -> None:
        """The run ended: write its final state (after the queued ones)."""
        self.close()
        if self.error is not None:
            raise CheckpointError(f"writing a checkpoint to {self.directory} failed: {self.error}") from self.error
        if self.enabled and self.run.state is not None:
            self.run.checkpoint(self.directory)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
