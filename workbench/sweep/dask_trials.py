"""Trials as Dask tasks: the task each trial is, and its channel back to the sweep.

A trial's events go out as Dask events on the sweep's topic (``Worker.log_event``; the
sweep subscribes); the sweep's stop requests come back through one Dask ``Variable``
holding the trials asked to stop (``"all"``: the whole sweep), read at most every
``ask_every_s``. A worker lost mid-trial makes Dask run the task again on another worker;
the trial then goes on from its newest checkpoint (:func:`workbench.sweep.trial.run_trial`).
"""

from __future__ import annotations

from typing import Any

from workbench.sweep.grid import Trial
from workbench.sweep.trial import Notebook, TrialChannel, TrialSpec, run_trial

__all__ = ["DaskChannel", "trial_task", "topic_of", "stop_variable_of"]


def topic_of(sweep_id: str) -> str:
    return f"workbench-sweep-{sweep_id}"


def stop_variable_of(sweep_id: str) -> str:
    return f"workbench-sweep-{sweep_id}-stop"


class DaskChannel(TrialChannel):
    """Events out through the worker's event log, stops in through a Dask ``Variable``."""

    def __init__(self, sweep_id: str) -> None:
        from distributed import Variable, get_worker

        self.worker = get_worker()
        self.topic = topic_of(sweep_id)
        self.stops = Variable(stop_variable_of(sweep_id))

    def report(self, event: dict[str, Any]) -> None:
        self.worker.log_event(self.topic, event)

    def stop_asked(self, trial: int) -> bool:
        try:
            asked = self.stops.get(timeout=5)
        except Exception:  # noqa: BLE001 - the scheduler busy or gone: go on, ask again later
            return False
        return "all" in asked or trial in asked

    def where(self) -> str:
        return str(self.worker.name)


def trial_task(notebook: Notebook, trial: Trial, spec: TrialSpec, sweep_id: str) -> dict[str, Any]:
    """The Dask task of one trial."""
    return run_trial(notebook, trial, spec, DaskChannel(sweep_id))
