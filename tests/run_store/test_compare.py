"""wb.compare on real runs: the Bokeh figure's glyphs and data, the numbers, the errors."""

from __future__ import annotations

import numpy as np
import pytest
from bokeh.models import GlyphRenderer, Line, VArea

import workbench as wb
from workbench.run_store import iqm, stratified_bootstrap_ci

from .conftest import toy_fdg


@pytest.fixture
def grid_store(store):
    """Four runs: lr 0.1 and 1.0, two seeds each."""
    for lr in (0.1, 1.0):
        for seed in (0, 1):
            toy_fdg(lr, seed).run(iterations=4, steps=6, progress=False, run_store=store, run_name="grid")
    return store


def _glyphs(figure, kind):
    return [r for r in figure.renderers if isinstance(r, GlyphRenderer) and isinstance(r.glyph, kind)]


def test_grouped_by_a_setting_draws_an_iqm_line_in_a_ci_band_per_group(grid_store):
    cmp = wb.compare(by="cfg.lr", store=grid_store, points=20, reps=500)
    lines, bands = _glyphs(cmp.figure, Line), _glyphs(cmp.figure, VArea)
    assert len(lines) == len(bands) == 2
    for renderer in lines + bands:
        assert set(renderer.data_source.data) >= {"x", "iqm", "lower", "upper", "runs"}
    table = cmp.table
    assert list(table.columns) == ["group", "x", "iqm", "lower", "upper", "runs"]
    assert sorted(set(table["group"])) == ["0.1", "1.0"] and set(table["runs"]) == {2}
    assert (table["lower"] <= table["iqm"] + 1e-12).all() and (table["iqm"] <= table["upper"] + 1e-12).all()
    last = table.groupby("group")["iqm"].last()
    assert last["1.0"] > last["0.1"]  # the bigger lr's returns grow faster
    # the numbers are the stats' own, on the runs' curves put on the group's x grid
    runs = [wb.load_run(path, state=False) for path in wb.runs(grid_store).query("`cfg.lr` == 1.0")["path"]]
    part = table[table["group"] == "1.0"]
    curves = np.stack([np.interp(part["x"], *_curve(run)) for run in runs])
    point, lower, upper = stratified_bootstrap_ci([curves], iqm, reps=500, seed=0)
    np.testing.assert_allclose(part["iqm"], point)
    np.testing.assert_allclose(part["upper"], upper)


def _curve(run):
    rows = [r for r in run.rows if "charts/episodic_return" in r]
    return [r["env_steps"] for r in rows], [r["charts/episodic_return"] for r in rows]


def test_per_run_draws_a_line_per_run_with_its_own_points(grid_store):
    table_of_runs = wb.runs(grid_store)
    cmp = wb.compare(table_of_runs.iloc[:3], store=grid_store)  # a wb.runs() table picks the runs
    lines = _glyphs(cmp.figure, Line)
    assert len(lines) == 3 and not _glyphs(cmp.figure, VArea)
    first = wb.load_run(table_of_runs["path"][0], state=False)
    xs, ys = _curve(first)
    mine = cmp.table[cmp.table["run"] == first.id]
    assert list(mine["x"]) == xs and list(mine["value"]) == ys
    assert list(lines[0].data_source.data["value"]) == ys


def test_runs_in_memory_and_other_axes(store):
    made = [toy_fdg(seed=s).run(iterations=3, steps=6, progress=False, run_store="off") for s in (0, 1)]
    cmp = wb.compare(made, x="iteration")
    assert len(_glyphs(cmp.figure, Line)) == 2 and cmp.figure.xaxis[0].axis_label == "iteration"
    with pytest.raises(wb.MetricError, match="x must be one of env_steps, iteration, time_s"):
        wb.compare(made, x="steps")
    for seed, run in enumerate(made):  # what a sweep gives its runs: their settings
        run.config = {"notebook": {"cfg.lr": 0.1, "cfg.seed": seed}}
    grouped = wb.compare(made, by="cfg.lr", reps=200)
    assert set(grouped.table["group"]) == {"0.1"} and set(grouped.table["runs"]) == {2}


def test_comparing_runs_without_the_metric_says_what_they_logged(grid_store):
    with pytest.raises(
        wb.MetricError,
        match=r"none of the 4 runs logged 'charts/loss': nothing to compare. They logged: .*charts/episodic_return",
    ):
        wb.compare(store=grid_store, metric="charts/loss")
    quiet = toy_fdg(step="t += 1\nwb.count_env_steps(1)\n").run(
        iterations=2, steps=3, progress=False, run_store=grid_store
    )
    assert quiet.status == "finished"
    with pytest.raises(wb.MetricError, match=r"1 of the 5 runs \(.*-fdg-.*\) did not log 'charts/episodic_return'"):
        wb.compare(store=grid_store)


def test_grouping_by_a_setting_the_runs_lack_names_those_they_have(grid_store):
    with pytest.raises(wb.MetricError, match=r"by='cfg.gamma'.*have no such setting.*cfg\.lr"):
        wb.compare(by="cfg.gamma", store=grid_store)
    by_policy = wb.compare(by="policy", store=grid_store, points=5, reps=100)
    assert set(by_policy.table["group"]) == {"inline"} and set(by_policy.table["runs"]) == {4}


def test_the_plot_saves_as_one_html_file(grid_store, tmp_path):
    path = wb.compare(by="cfg.lr", store=grid_store, reps=100).save(tmp_path / "cmp.html")
    text = open(path).read()
    assert "Bokeh" in text and "cfg.lr=0.1" in text
