"""The run store with real runs: what a run leaves, listing, loading, resuming, and the errors."""

from __future__ import annotations

import json
import shutil
import warnings

import nbformat
import pandas as pd
import pytest

import workbench as wb
from workbench.run_store import RunStoreError, RunStoreWarning, StoredRun, read_run
from workbench.run_store.record import RecordedError
from workbench.run_store.store import MARKER, STORE_ENV

from .conftest import toy_fdg


def _only_folder(store):
    folders = [p for p in store.iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1, folders
    return folders[0]


def test_a_run_leaves_its_whole_record_and_reads_back_as_a_run(store):
    run = toy_fdg(lr=0.2, seed=3).run(iterations=4, steps=6, progress=False, run_store=store, run_name="toy")
    folder = _only_folder(store)
    assert (store / MARKER).is_file()
    assert sorted(p.name for p in folder.iterdir()) == [
        "cells.json",
        "checkpoint",
        "config.json",
        "events.jsonl",
        "metrics.jsonl",
        "returns.json",
        "summary.json",
    ]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["id"] == folder.name and folder.name.split("-")[2] == "toy"
    assert (summary["status"], summary["solved"], summary["iterations"], summary["env_steps"]) == (
        "finished",
        False,
        4,
        run.env_steps,
    )
    assert (summary["seed"], summary["policy"], summary["name"]) == (3, "inline", "toy")
    assert summary["final_return"] == pytest.approx(run.mean_return())
    config = json.loads((folder / "config.json").read_text())
    assert config["notebook"] == {"cfg.lr": 0.2, "cfg.seed": 3}
    assert config["run"]["iterations"] == 4 and config["run"]["policy"] == "inline"

    back = wb.load_run(folder.name, store=store)
    assert isinstance(back, StoredRun) and isinstance(back, type(run))
    assert back.rows == run.rows and back.episode_returns == run.episode_returns
    pd.testing.assert_frame_equal(back.metrics, run.metrics)
    assert (back.status, back.env_steps, back.completed_iterations, back.seed) == ("finished", run.env_steps, 4, 3)
    assert back.summary() == run.summary()  # the Run's own text, from what was kept
    assert back.checkpoint_path == folder / "checkpoint"
    assert back.state.iteration == 4 and "w" in back.state.fragments["env"][0]  # resumed from below
    assert back.policy.name == "inline" and sorted(back.fdg.fragments) == ["env"]
    assert back.fdg.notebook_names() == run.fdg.notebook_names()
    namespace = {"cfg": None}
    assert wb.load_run(folder, namespace=namespace, state=False).fdg.namespace is namespace


def test_a_run_resumes_from_its_kept_checkpoint(store):
    first = toy_fdg().run(iterations=3, steps=5, progress=False, run_store=store)
    kept = wb.load_run(_only_folder(store))  # by its folder
    again = toy_fdg().run(resume=kept.checkpoint_path, iterations=2, steps=5, progress=False, run_store=store)
    assert [row["iteration"] for row in again.rows] == [3, 4]
    assert again.env_steps == first.env_steps + 2 * 5 * 2
    assert float(again.state.fragments["env"][0]["w"][0]) == pytest.approx(0.1 * 25)
    assert len(wb.runs(store)) == 2


def test_the_listing_has_a_row_per_run_with_the_notebook_settings(store):
    for lr, seed in ((0.1, 0), (0.5, 1), (0.5, 2)):
        toy_fdg(lr, seed).run(iterations=2, steps=6, progress=False, run_store=store, run_name="grid")
    table = wb.runs(store)
    assert list(table.columns[:12]) == [
        "id",
        "started",
        "name",
        "policy",
        "seed",
        "status",
        "solved",
        "iterations",
        "env_steps",
        "final_return",
        "best_return",
        "wall_s",
    ]
    assert list(table["cfg.lr"]) == [0.1, 0.5, 0.5] and list(table["seed"]) == [0, 1, 2]  # oldest first
    assert set(table["name"]) == {"grid"} and set(table["status"]) == {"finished"}
    assert str(table["started"].dtype).startswith("datetime64")
    assert (table["best_return"] >= table["final_return"]).all()


def test_a_failed_run_leaves_its_record_with_why(store):
    broken = toy_fdg(step="t += 1\nwb.count_env_steps(1)\nif t == 8:\n    raise ValueError('boom at 8')\n")
    with pytest.raises(wb.FragmentRuntimeError):
        broken.run(iterations=5, steps=5, progress=False, run_store=store)
    row = wb.runs(store).iloc[0]
    assert row["status"] == "failed" and row["iterations"] == 1
    back = wb.load_run(row)  # a row of wb.runs() works too
    assert isinstance(back.error, RecordedError) and "boom at 8" in str(back.error)


def test_the_store_can_be_turned_off_and_defaults_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env-store"))
    toy_fdg().run(iterations=1, steps=3, progress=False, run_store="off")
    toy_fdg().run(iterations=1, steps=3, progress=False, run_store=False)
    assert not (tmp_path / "env-store").exists()
    toy_fdg().run(iterations=1, steps=3, progress=False)
    assert len(wb.runs()) == 1 and len(wb.runs(tmp_path / "env-store")) == 1
    monkeypatch.setenv(STORE_ENV, "off")
    toy_fdg().run(iterations=1, steps=3, progress=False)
    assert len(wb.runs(tmp_path / "env-store")) == 1


def test_a_folder_that_is_not_a_store_refuses_the_run_before_it_trains(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    fdg = toy_fdg()
    with pytest.raises(RunStoreError, match="is not a run store: it holds other files"):
        fdg.run(iterations=1, steps=3, progress=False, run_store=tmp_path)
    assert fdg.last_run is None and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(RunStoreError, match="is not a run store"):
        wb.runs(tmp_path)
    with pytest.raises(RunStoreError, match="no run store at"):
        wb.runs(tmp_path / "missing")
    with pytest.raises(wb.RunConfigError, match="takes a directory, or off"):
        fdg.run(iterations=1, run_store=True)


def test_the_default_store_not_made_yet_lists_no_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "not-yet"))
    assert wb.runs().empty


def test_damaged_run_folders_are_skipped_with_a_warning(store):
    toy_fdg().run(iterations=1, steps=3, progress=False, run_store=store)
    good = _only_folder(store)
    shutil.copytree(good, store / "20200101-000000-torn-0001")
    (store / "20200101-000000-torn-0001" / "summary.json").write_text('{"format": "workbench-run", ')
    (store / "20200101-000000-empty-0002").mkdir()
    shutil.copytree(good, store / "20200101-000000-badconfig-0003")
    (store / "20200101-000000-badconfig-0003" / "config.json").write_text("[not json")
    (store / ".tmp-20200101-000000-half-0004").mkdir()  # a run being written: not a run yet, no warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = wb.runs(store)
    assert list(table["id"]) == [good.name]
    said = sorted(str(w.message) for w in caught if issubclass(w.category, RunStoreWarning))
    assert len(said) == 3
    assert "torn-0001" in said[2] and "damaged" in said[2]
    assert "empty-0002" in said[1] and "no summary.json" in said[1]
    assert "badconfig-0003" in said[0]
    with pytest.raises(RunStoreError, match="damaged"):
        read_run(store / "20200101-000000-torn-0001")
    with pytest.raises(RunStoreError, match="not a run's folder"):
        wb.load_run(store / "20200101-000000-empty-0002")


def test_an_unknown_run_id_names_the_closest(store):
    for seed in (0, 1):
        toy_fdg(seed=seed).run(iterations=1, steps=3, progress=False, run_store=store, run_name="cartpole")
    ids = list(wb.runs(store)["id"])
    assert wb.load_run(ids[0][-4:], store=store, state=False).id == ids[0]  # a part only it has
    with pytest.raises(RunStoreError, match="names 2 runs"):
        wb.load_run("cartpole", store=store)
    with pytest.raises(RunStoreError, match=r"no run 'cartpoel-x' in the run store .*Closest: .*cartpole"):
        wb.load_run("cartpoel-x", store=store)


def test_workbench_run_keeps_the_run_under_the_notebooks_name(tmp_path, capsys):
    from workbench.cli import main

    notebook = tmp_path / "tiny-loop.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_code_cell("import workbench as wb"),
                nbformat.v4.new_code_cell("%%fragment env --init\nt = 0"),
                nbformat.v4.new_code_cell("%%fragment env\nt += 1\nwb.count_env_steps(1)"),
            ]
        ),
        notebook,
    )
    assert (
        main(
            [
                "run",
                str(notebook),
                "--iterations",
                "2",
                "--steps",
                "3",
                "--no-progress",
                "--run-store",
                str(tmp_path / "store"),
            ]
        )
        == 0
    )
    row = wb.runs(tmp_path / "store").iloc[0]
    assert (row["name"], row["iterations"], row["env_steps"], row["status"]) == ("tiny-loop", 2, 6, "finished")
