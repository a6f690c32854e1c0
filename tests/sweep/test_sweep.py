"""Sweeps on a 2-worker LocalCluster: every trial runs with its settings, the median rule
stops the trials behind, a stop keeps what finished, a killed worker's trial goes on from
its checkpoint elsewhere, and bad input is refused before anything runs."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

import workbench as wb
from workbench.cli import main
from workbench.errors import RunConfigError
from workbench.sweep import MedianStopping, SweepControl, sweep


def level_fdg(sleep: float = 0.0) -> wb.FDG:
    """A learner whose 'return' climbs by lr × (1 + seed % 3) an iteration: each trial's
    numbers say which settings and seed it ran with."""
    fdg = wb.FDG(namespace={"cfg": {"seed": 1, "lr": 0.1, "sleep": sleep}, "time": time, "wb": wb})
    fdg.add_fragment("env", "tick = 0", rate="init")
    fdg.add_fragment("env", "time.sleep(cfg['sleep'])\ntick = tick + 1", rate="step")  # iterations of some length
    fdg.add_fragment("learner", "level = 0.0", rate="init")
    fdg.add_fragment(
        "learner",
        "level += cfg['lr'] * (1 + cfg['seed'] % 3)\nwb.log('charts/episodic_return', level)",
        rate="iteration",
    )
    return fdg


def test_every_trial_runs_with_its_settings_and_seed(client):
    result = sweep(level_fdg(), {"cfg.lr": [1.0, 2.0]}, seeds=3, iterations=4, steps=1, cluster=client, progress=False)
    table = result.table
    assert list(table["status"]) == ["finished"] * 6 and not result.interrupted
    assert list(table["seed"]) == [1, 1, 2, 2, 3, 3] and list(table["cfg.lr"]) == [1.0, 2.0] * 3
    # the returns logged were lr·k·(1 + seed % 3) for k = 1..4: their mean is 2.5·lr·(1 + seed % 3)
    for trial, row in table.iterrows():
        assert row["mean_return"] == pytest.approx(2.5 * row["cfg.lr"] * (1 + row["seed"] % 3)), trial
    assert set(table["worker"]) <= {str(w["name"]) for w in client.scheduler_info()["workers"].values()}
    assert sorted(result.runs) == list(range(6)) and result.runs[3].status == "finished"
    assert "sweep of 6 trials" in result.summary() and "6 finished" in result.summary()


def test_trials_behind_the_median_are_stopped_early(client):
    result = sweep(
        level_fdg(sleep=0.03),
        {"cfg.lr": [0.01, 1.0]},
        seeds=[3, 6],
        iterations=80,
        steps=1,
        cluster=client,
        progress=False,
        early_stop=MedianStopping(grace=5, min_trials=1),
    )
    table = result.table
    slow, fast = table[table["cfg.lr"] == 0.01], table[table["cfg.lr"] == 1.0]
    assert set(fast["status"]) == {"finished"}, table
    assert "stopped early" in set(slow["status"]), table
    stopped = slow[slow["status"] == "stopped early"]
    assert (stopped["iterations"] < 80).all(), table


def test_a_stop_ends_the_running_trials_and_keeps_the_finished_ones(client):
    control = SweepControl()

    class StopAfterTwo:
        def __init__(self, table):
            pass

        def update(self, table):
            if len(table.finished()) >= 2:
                control.stop()

        def close(self, table):
            pass

    result = sweep(
        level_fdg(sleep=0.02),
        {"cfg.lr": [1.0]},
        seeds=6,
        iterations=30,
        steps=1,
        cluster=client,
        progress=StopAfterTwo,
        control=control,
    )
    statuses = list(result.table["status"])
    assert result.interrupted and statuses.count("finished") >= 2, statuses
    assert "not run" in statuses and set(statuses) <= {"finished", "stopped", "not run"}, statuses
    assert "interrupted" in result.summary()


def test_a_killed_workers_trial_goes_on_from_its_checkpoint_elsewhere(doomed_cluster, tmp_path):
    client = doomed_cluster
    pids = client.run(os.getpid)
    killed: dict = {}

    class KillOnce:  # kill the worker of trial 0 once it is well past a checkpoint
        def __init__(self, table):
            pass

        def update(self, table):
            row = table.rows[0]
            if not killed and row.status == "running" and row.done >= 25:
                workers = client.scheduler_info()["workers"]
                address = next(a for a in pids if str(workers.get(a, {}).get("name")) == row.worker)
                killed.update(worker=row.worker, at=row.done)
                os.kill(pids[address], signal.SIGKILL)

        def close(self, table):
            pass

    result = sweep(
        level_fdg(sleep=0.04),
        {"cfg.lr": [1.0]},
        seeds=2,
        iterations=60,
        steps=1,
        cluster=client,
        progress=KillOnce,
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every=5,
    )
    table = result.table
    assert killed and list(table["status"]) == ["finished", "finished"], (killed, table)
    resumed = table.loc[0, "resumed_from"]
    assert resumed is not None and int(resumed) >= 5, table  # from a checkpoint, not from iteration 0
    assert "resumed from iteration" in result.trials.text()
    # the resumed trial's numbers are those of an uninterrupted one: its level went on from the checkpoint
    assert result.runs[0].rows[-1]["charts/episodic_return"] == pytest.approx(60 * 1.0 * (1 + 1 % 3))


@pytest.mark.parametrize(
    "kwargs, said",
    [
        (dict(over={"cfg.lrr": [1.0]}), "did you mean 'lr'"),
        (dict(over={"cfg.lr": []}), "empty"),
        (dict(seeds=0), "≥ 1"),
        (dict(over={"cfg.seed": [1, 2]}), "seeds are given with seeds="),
        (dict(policy="coarse"), "inline"),
        (dict(iterations=0), "--iterations"),
        (dict(checkpoint_dir="x", checkpoint_every=0), "checkpoint_every"),
        (dict(resume="somewhere"), "decides resume"),
        (dict(seed_key="cfg.sead"), "did you mean 'seed'"),
        (dict(early_stop="median"), "MedianStopping"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(kwargs, said):
    with pytest.raises(RunConfigError, match=said):
        sweep(level_fdg(), **{"over": {"cfg.lr": [1.0]}, "seeds": 2, "progress": False, **kwargs})


def test_more_trials_at_once_than_the_cluster_holds_is_refused(client):
    with pytest.raises(RunConfigError, match="holds 2 trials at once"):
        sweep(level_fdg(), seeds=4, trials_at_once=3, cluster=client, progress=False, iterations=1, steps=1)


def test_the_command_line_sweeps_a_notebook(client, tmp_path, capsys):
    cells = [
        "import time\nimport workbench as wb\ncfg = {'seed': 1, 'lr': 0.1, 'sleep': 0.0}",
        "%%fragment learner --init\nlevel = 0.0",
        "%%fragment learner\nlevel += cfg['lr'] * (1 + cfg['seed'] % 3)\nwb.log('charts/episodic_return', level)",
        "%fdg run --iterations 4 --steps 1",
    ]
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c} for c in cells
        ],
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    csv = tmp_path / "trials.csv"
    code = main(
        [
            "sweep",
            str(path),
            "--seeds",
            "2",
            "--set",
            "cfg.lr=1.0,2.0",
            "--set",
            "cfg.sleep=0.001",
            "--cluster",
            client.scheduler.address,
            "--csv",
            str(csv),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "sweep of 4 trials" in out and "4 finished" in out and "lr=2.0" in out, out
    assert csv.read_text().count("finished") == 4
    assert main(["sweep", str(path), "--seeds", "0"]) == 2
    assert "seeds" in capsys.readouterr().err
