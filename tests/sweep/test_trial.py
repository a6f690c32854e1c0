"""A trial where it is called (no cluster): its settings, its stop, its resume from the
checkpoint an earlier attempt left, and the result's table and plot."""

from __future__ import annotations

import pytest

from tests.sweep.test_sweep import level_fdg
from workbench.sweep.grid import trial_grid
from workbench.sweep.result import SweepResult
from workbench.sweep.table import SweepTable
from workbench.sweep.trial import Notebook, TrialChannel, TrialSpec, run_trial


class Recorded(TrialChannel):
    def __init__(self, stop_after: int | None = None) -> None:
        self.events: list[dict] = []
        self.stop_after = stop_after

    def report(self, event):
        self.events.append(event)

    def stop_asked(self, trial):
        done = [e["iteration"] for e in self.events if e["kind"] == "progress"]
        return self.stop_after is not None and bool(done) and done[-1] + 1 >= self.stop_after


def _notebook() -> Notebook:
    fdg = level_fdg()
    return Notebook(list(fdg.fragments.values()), dict(fdg.namespace))


def test_a_trial_stopped_midway_goes_on_from_its_checkpoint_when_run_again(tmp_path):
    trial = trial_grid({"cfg.lr": [2.0]}, seeds=[4])[0]
    spec = TrialSpec(
        options={"iterations": 12, "steps": 1, "run_store": False},
        checkpoint_root=str(tmp_path),
        checkpoint_every=2,
        report_every_s=0.0,
        ask_every_s=0.0,
    )
    first = run_trial(_notebook(), trial, spec, Recorded(stop_after=5))
    assert first["status"] == "stopped" and 5 <= first["iterations"] < 12, first
    again = Recorded()
    second = run_trial(_notebook(), trial, spec, again)
    start = again.events[0]
    assert start["kind"] == "started" and start["from_iteration"] >= 4, start  # the newest checkpoint, not 0
    assert second["status"] == "finished" and second["iterations"] == 12 and second["resumed_from"] >= 4
    # the level went on from the checkpoint: 12 iterations of lr·(1 + seed % 3) = 2·2 each
    assert second["run"].rows[-1]["charts/episodic_return"] == pytest.approx(12 * 4.0)


def test_the_result_is_a_table_and_a_grouped_plot():
    trials = trial_grid({"cfg.lr": [1.0, 2.0]}, seeds=3)
    table = SweepTable(trials, iterations=5)
    spec = TrialSpec(options={"iterations": 5, "steps": 1, "run_store": False})
    for trial in trials:
        table.apply({"trial": trial.index, "kind": "ended", "result": run_trial(_notebook(), trial, spec, Recorded())})
    result = SweepResult(table, wall_s=1.0)
    frame = result.table
    assert list(frame.columns[:3]) == ["seed", "cfg.lr", "status"] and list(frame["status"]) == ["finished"] * 6
    assert sorted(result.runs) == list(range(6))
    comparison = result.plot()  # by the swept setting: IQM across the seeds, per lr
    assert sorted(set(map(float, comparison.table["group"]))) == [1.0, 2.0]


def test_a_sweep_of_seeds_alone_plots_every_seed_as_one_group():
    trials = trial_grid({}, seeds=3)
    table = SweepTable(trials, iterations=4)
    spec = TrialSpec(options={"iterations": 4, "steps": 1, "run_store": False})
    for trial in trials:
        table.apply({"trial": trial.index, "kind": "ended", "result": run_trial(_notebook(), trial, spec, Recorded())})
    comparison = SweepResult(table, wall_s=1.0).plot()  # nothing swept but the seed: their IQM and its band
    assert set(comparison.table["group"]) == {"inline"} and set(comparison.table["runs"]) == {3}
