"""The sweep's pure parts: the trial grid, settings, the median-stopping rule, the table."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workbench.errors import RunConfigError
from workbench.sweep.grid import seed_list, trial_grid
from workbench.sweep.settings import check_settings, with_settings
from workbench.sweep.stopping import MedianStopping
from workbench.sweep.table import SweepTable


@dataclass
class Config:
    seed: int = 1
    learning_rate: float = 3e-3
    num_envs: int = 16


@dataclass(frozen=True)
class Frozen:
    seed: int = 1


# -- the grid ---------------------------------------------------------------------------
def test_the_grid_is_every_combination_for_every_seed_seed_major():
    trials = trial_grid({"cfg.learning_rate": [1e-3, 3e-3], "cfg.num_envs": [8, 16]}, seeds=[3, 5])
    assert [t.index for t in trials] == list(range(8))
    assert [t.seed for t in trials] == [3] * 4 + [5] * 4
    assert trials[1].settings == {"cfg.learning_rate": 1e-3, "cfg.num_envs": 16}
    assert trials[1].label() == "learning_rate=0.001, num_envs=16"
    assert [t.settings for t in trial_grid({}, 2)] == [{}, {}]


@pytest.mark.parametrize(
    "seeds, said",
    [
        (0, "≥ 1"),
        (-2, "≥ 1"),
        ([], "empty"),
        ([1, 1], "repeat"),
        ([1.5], "whole numbers"),
        ("3", "number of seeds"),
        (True, "number of seeds"),
    ],
)
def test_bad_seeds_are_refused_by_name(seeds, said):
    with pytest.raises(RunConfigError, match=said):
        seed_list(seeds)


@pytest.mark.parametrize(
    "over, said",
    [
        ({"cfg.learning_rate": []}, "empty"),
        ({"cfg.learning_rate": 1e-3}, "list of values"),
        ({"cfg.learning_rate": "1e-3"}, "list of values"),
        (["cfg.lr"], "dict"),
    ],
)
def test_bad_over_is_refused_by_name(over, said):
    with pytest.raises(RunConfigError, match=said):
        trial_grid(over, 1)


# -- settings ---------------------------------------------------------------------------
def test_settings_are_checked_against_the_notebook_objects():
    ns = {"cfg": Config(), "n": 3, "table": {"lr": 0.1}}
    check_settings(ns, {"cfg.learning_rate": [1e-3, 1], "table.lr": [0.2]})  # an int for a float field is fine
    for over, said in [
        ({"cfg.learning_rat": [1]}, "did you mean 'learning_rate'"),
        ({"conf.seed": [1]}, "defines no 'conf'"),
        ({"n.real": [1]}, "has no fields"),
        ({"cfg.num_envs": [8.5]}, "is a int"),
        ({"learning_rate": [1]}, "NAME.FIELD"),
    ]:
        with pytest.raises(RunConfigError, match=said):
            check_settings(ns, over)


def test_settings_apply_to_copies_and_never_to_the_notebook():
    cfg, frozen, table = Config(), Frozen(), {"lr": 0.1}
    ns = {"cfg": cfg, "frozen": frozen, "table": table}
    out = with_settings(ns, {"cfg.learning_rate": 1, "cfg.seed": 7, "frozen.seed": 2, "table.lr": 0.5})
    assert out["cfg"] == Config(seed=7, learning_rate=1.0) and isinstance(out["cfg"].learning_rate, float)
    assert out["frozen"] == Frozen(2) and out["table"] == {"lr": 0.5}
    assert ns["cfg"] is cfg and cfg == Config() and frozen == Frozen() and table == {"lr": 0.1}


# -- median stopping ----------------------------------------------------------------------
def _curve(values, start=0):
    return [(start + i, float(v)) for i, v in enumerate(values)]


def test_a_trial_behind_the_median_is_stopped_only_after_its_grace():
    rule = MedianStopping(grace=3, min_trials=2)
    good = _curve([10, 20, 30, 40])
    assert not rule.should_stop(_curve([1, 2]), [good, good])  # 2 iterations < grace
    assert rule.should_stop(_curve([1, 2, 3]), [good, good])
    assert not rule.should_stop(_curve([1, 2, 3]), [good])  # too few others to judge
    # its best so far against their running averages up to its iteration: (10+20+30)/3 = 20
    assert not rule.should_stop(_curve([1, 25, 3]), [good, good])
    assert rule.should_stop(_curve([1, 19, 3]), [good, good])


def test_trials_not_yet_at_the_iteration_do_not_count():
    rule = MedianStopping(grace=1, min_trials=1)
    assert not rule.should_stop(_curve([1, 1, 1, 1, 1]), [_curve([50, 50])])  # the other is behind in iterations
    assert not rule.should_stop(_curve([1, 1]), [_curve([50, 50], start=5)])  # the other reported only later
    assert rule.should_stop(_curve([1, 1]), [_curve([50, 50, 50])])


def test_the_rule_refuses_nonsense():
    with pytest.raises(RunConfigError, match="grace"):
        MedianStopping(grace=0)


# -- the table --------------------------------------------------------------------------
def test_the_table_follows_a_trial_through_a_lost_worker_to_its_end():
    table = SweepTable(trial_grid({"cfg.lr": [1e-3, 3e-3]}, seeds=1), iterations=50)
    table.apply({"trial": 0, "kind": "started", "where": "w1", "from_iteration": 0})
    table.apply({"trial": 0, "kind": "progress", "iteration": 19, "return": 40.0})
    table.apply({"trial": 0, "kind": "started", "where": "w2", "from_iteration": 10})
    row = table.rows[0]
    assert (row.status, row.done, row.worker, row.resumed_from) == ("running", 10, "w2", [10])
    assert "resumed from iteration 10 (w1 lost)" in table.text()
    table.apply({"trial": 0, "kind": "progress", "iteration": 29, "return": 60.0})
    table.apply({"trial": 0, "kind": "ended", "result": {"status": "finished", "iterations": 50, "mean_return": 80.0}})
    table.apply({"trial": 0, "kind": "progress", "iteration": 30, "return": 1.0})  # a late report: ignored
    assert (row.status, row.done, row.mean_return) == ("finished", 50, 80.0)
    assert table.counts() == {"finished": 1, "queued": 1}
    assert "<table" in table.html() and "1 finished, 1 queued" in table.html()
    lines = table.text().splitlines()
    assert lines[0].split() == ["trial", "seed", "settings", "status", "progress", "return", "where"]
    assert lines[2].split()[:5] == ["1", "1", "lr=0.003", "queued", "0/50"]


def test_a_trial_started_again_before_any_checkpoint_says_it_started_over():
    table = SweepTable(trial_grid({}, seeds=1), iterations=5)
    table.apply({"trial": 0, "kind": "started", "where": "w1", "from_iteration": 0})
    table.apply({"trial": 0, "kind": "started", "where": "w2", "from_iteration": 0})
    assert table.rows[0].resumed_from == [0] and "started over (w1 lost): no checkpoint yet" in table.text()
