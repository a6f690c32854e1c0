"""One trial, run to its end where it is called: a Dask task on a worker (or a test's thread).

The trial builds the sweep's FDG from the shipped notebook with its settings and seed,
runs it under the inline policy in this process (one torch thread), and reports through
its :class:`TrialChannel` as it goes: ``started`` (where, and from which iteration),
``progress`` (iteration, mean return; at most every ``report_every_s``). Every
``checkpoint_every`` iterations it writes a checkpoint to its own directory under the
sweep's; a trial started again after its worker was lost goes on from the newest one there.
Between iterations it asks the channel whether to stop (the median rule, or the sweep's
stop), and then ends at that boundary.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import WorkbenchError
from workbench.loaded_modules import loaded
from workbench.runtime.state.checkpoint import load_checkpoint, newest_loadable
from workbench.session import FDG
from workbench.sweep.grid import Trial
from workbench.sweep.settings import with_settings

__all__ = ["Notebook", "TrialSpec", "TrialChannel", "run_trial", "trial_directory"]


@dataclass
class Notebook:
    """What every trial builds its FDG from: the cells and the notebook values they read."""

    fragments: list
    namespace: dict[str, Any]


@dataclass(frozen=True)
class TrialSpec:
    """What the sweep's trials share beside the notebook."""

    #: RunConfig options of each trial's run (iterations, steps, target_return, …)
    options: dict[str, Any] = field(default_factory=dict)
    #: the setting that takes the trial's seed
    seed_key: str = "cfg.seed"
    #: the sweep's checkpoint directory (each trial writes under it); None: no checkpoints
    checkpoint_root: str | None = None
    checkpoint_every: int = 10
    report_every_s: float = 0.25
    #: how often a running trial asks whether to stop
    ask_every_s: float = 0.5


class TrialChannel(ABC):
    """How a trial talks to its sweep."""

    @abstractmethod
    def report(self, event: dict[str, Any]) -> None:
        """Send one event (a plain dict with ``trial`` and ``kind``)."""

    @abstractmethod
    def stop_asked(self, trial: int) -> bool:
        """Whether the sweep asks ``trial`` to stop at its next iteration boundary."""

    def where(self) -> str:
        """The name of the worker the trial runs on."""
        return f"pid {os.getpid()}"


def trial_directory(root: str, trial: Trial) -> str:
    return os.path.join(root, f"trial-{trial.index:04d}")


class _Reporting:
    """The run's logger: progress reports, and the stop check, between iterations."""

    def __init__(self, fdg: FDG, trial: Trial, channel: TrialChannel, spec: TrialSpec) -> None:
        self.fdg, self.trial, self.channel, self.spec = fdg, trial, channel, spec
        self.reported = self.asked = 0.0
        self.stop_asked = False

    def log(self, row: dict) -> None:
        now = time.monotonic()
        if now - self.reported >= self.spec.report_every_s:
            self.reported = now
            run = self.fdg.last_run
            self.channel.report(
                {
                    "trial": self.trial.index,
                    "kind": "progress",
                    "iteration": int(row["iteration"]),
                    "return": run.mean_return() if run is not None else None,
                }
            )
        if not self.stop_asked and now - self.asked >= self.spec.ask_every_s:
            self.asked = now
            if self.channel.stop_asked(self.trial.index):
                self.stop_asked = True
                self.fdg.stop()

    def close(self) -> None:
        pass


def run_trial(notebook: Notebook, trial: Trial, spec: TrialSpec, channel: TrialChannel) -> dict[str, Any]:
    """Run ``trial`` here to its end; what it did as plain data (``run``: its record, without
    its state)."""
    torch = loaded("torch")
    if torch is not None:
        torch.set_num_threads(1)
    namespace = with_settings(notebook.namespace, {**trial.settings, spec.seed_key: trial.seed})
    fdg = FDG(notebook.fragments, namespace)
    # keep_state off: the record comes back without the fragments' state; with a checkpoint
    # directory the run still writes its checkpoints, the final one included
    options = {**spec.options, "policy": "inline", "progress": False, "keep_state": False}
    resume, start_at = None, 0
    if spec.checkpoint_root is not None:
        directory = trial_directory(spec.checkpoint_root, trial)
        newest = newest_loadable(directory) if os.path.isdir(directory) else None
        if newest is not None:
            resume = load_checkpoint(directory)
            start_at = int(resume.iteration)
            options.update(resume=resume, iterations=max(1, options["iterations"] - start_at))
        options.update(checkpoint_dir=directory, checkpoint_every=spec.checkpoint_every)
    channel.report({"trial": trial.index, "kind": "started", "where": channel.where(), "from_iteration": start_at})
    reporting = _Reporting(fdg, trial, channel, spec)
    started = time.perf_counter()
    try:
        run = fdg.run(**options, loggers=[reporting])
    except WorkbenchError as exc:
        return {
            "status": "failed",
            "error": str(exc).split("\n--- original traceback ---")[0],
            "iterations": start_at,
            "resumed_from": start_at,
            "wall_s": time.perf_counter() - started,
        }
    status = "solved" if run.solved_at else run.status  # the sweep knows which stops it asked for
    run.state = None  # the final checkpoint has it; the table needs the record only
    run.fdg = None
    # what wb.compare groups by: the trial's settings, as a stored run's notebook settings
    run.id = f"trial {trial.index}"
    run.config = {"notebook": {**trial.settings, spec.seed_key: trial.seed}, "run": {}}
    return {
        "status": status,
        "iterations": start_at + run.completed_iterations,
        "mean_return": run.mean_return(),
        "env_steps": run.env_steps,
        "solved_at": dict(run.solved_at) if run.solved_at else None,
        "resumed_from": start_at,
        "wall_s": time.perf_counter() - started,
        "error": None if run.error is None else f"{type(run.error).__name__}: {run.error}",
        "run": run,
    }
