"""The dashboard's /workbench-runs page, built as a browser session builds it (no browser)."""

from __future__ import annotations

from bokeh.models import GlyphRenderer, Line, VArea

import workbench as wb
from workbench.cluster.dashboard_runs import PER_RUN, RUNS_ROUTE, RunsPage

from .conftest import toy_fdg


def _glyphs(page, kind):
    figure = page.plot.children[0]
    return [r for r in figure.renderers if isinstance(r, GlyphRenderer) and isinstance(r.glyph, kind)]


def test_the_page_lists_the_store_and_compares_the_selected_runs(store):
    for lr in (0.1, 1.0):
        for seed in (0, 1):
            toy_fdg(lr, seed).run(iterations=3, steps=6, progress=False, run_store=store)
    page = RunsPage(store)
    assert page.source.data["id"] == list(wb.runs(store)["id"])
    assert "cfg.lr" in page.group_by.options and page.group_by.value == PER_RUN
    assert len(_glyphs(page, Line)) == 4  # nothing selected: every run, a line each
    page.source.selected.indices = [0, 2]
    assert len(_glyphs(page, Line)) == 2 and "2 of 4 runs" in page.message.text
    page.group_by.value = "cfg.lr"
    assert len(_glyphs(page, Line)) == len(_glyphs(page, VArea)) == 2
    page.metric.value = "charts/nothing"  # said on the page, not raised
    assert page.plot.children == [] and "none of the 2 runs logged" in page.message.text


def test_a_store_that_is_not_one_is_said_on_the_page(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    page = RunsPage(tmp_path)
    assert "is not a run store" in page.message.text and page.source.data["id"] == []


def test_the_page_is_registered_beside_the_workbench_page():
    from distributed.dashboard import scheduler as dashboard

    from workbench.cluster.dashboard import install

    assert install() and RUNS_ROUTE in dashboard.applications
