"""A "workbench-runs" page on the Dask dashboard: the run store's runs, and their curves compared.

A table of the runs kept in the run store (:mod:`workbench.run_store`); the runs selected in it
(all, when none is) are drawn as :func:`workbench.run_store.compare` draws them — a line per run,
or grouped by the setting picked in "Group by" as the IQM with its 95 % stratified-bootstrap
band. "Reload" reads the store again (runs that finished since). The page reads the store
the scheduler's process sees: for the embedded cluster, the notebook's own.

Route: ``/workbench-runs``, registered with the ``/workbench`` page by
:func:`workbench.cluster.dashboard.install`.
"""

from __future__ import annotations

import html
import logging

from workbench.run_store import compare, runs
from workbench.run_store.listing import LISTED
from workbench.run_store.store import store_path
from workbench.runtime.state.run import RETURN_METRIC

__all__ = ["RUNS_ROUTE", "RunsPage", "runs_doc"]

logger = logging.getLogger(__name__)

RUNS_ROUTE = "/workbench-runs"
#: "Group by"'s choice for a line per run
PER_RUN = "(a line per run)"
#: the table's columns (the listing's, less the started time's seconds)
SHOWN = ("id", "name", "policy", "seed", "status", "iterations", "env_steps", "final_return", "best_return")


class RunsPage:
    """One browser session's view of a run store."""

    def __init__(self, store=None, *, standalone: bool = True) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import Button, ColumnDataSource, DataTable, Div, Select, TableColumn, TextInput

        self.store = store if store is not None else store_path(None)
        self.table = None  # the listing, a DataFrame
        self.message = Div(text="", sizing_mode="stretch_width")
        self.store_input = TextInput(title="Run store", value=str(self.store or ""), width=420)
        self.reload = Button(label="Reload", width=90)
        self.group_by = Select(title="Group by", value=PER_RUN, options=[PER_RUN], width=220)
        self.metric = TextInput(title="Metric", value=RETURN_METRIC, width=260)
        self.x_axis = Select(title="x", value="env_steps", options=["env_steps", "iteration", "time_s"], width=120)
        self.source = ColumnDataSource({column: [] for column in SHOWN})
        self.runs_table = DataTable(
            source=self.source,
            columns=[TableColumn(field=c, title=c) for c in SHOWN],
            height=220,
            sizing_mode="stretch_width",
            selectable="checkbox",
            index_position=None,
        )
        self.plot = column(sizing_mode="stretch_width")
        self.reload.on_click(lambda: self.load())
        self.store_input.on_change("value", lambda attr, old, new: self.load(new))
        for widget in (self.group_by, self.metric, self.x_axis):
            widget.on_change("value", lambda attr, old, new: self.draw())
        self.source.selected.on_change("indices", lambda attr, old, new: self.draw())
        controls = row(
            self.store_input, self.reload, self.group_by, self.metric, self.x_axis, sizing_mode="stretch_width"
        )
        self.root = column(
            controls,
            self.message,
            self.runs_table,
            self.plot,
            sizing_mode="stretch_width",
            styles={"padding": "4px 12px"} if standalone else {},
        )
        self.load()

    def load(self, store=None) -> None:
        """Read the store (again); keep the selection's runs where they still are."""
        if store is not None:
            self.store = store
        try:
            self.table = runs(self.store)
        except Exception as exc:  # noqa: BLE001 - said on the page: a typo in the store box is no crash
            self.table = None
            self.source.data = {column: [] for column in SHOWN}
            self._say(f"{exc}")
            return
        self.source.data = {column: [_cell(v) for v in self.table[column]] for column in SHOWN}
        settings = [c for c in self.table.columns if c not in LISTED and c != "path"]
        self.group_by.options = [PER_RUN, "policy", "name", *settings]
        self.draw()

    def draw(self) -> None:
        """Plot the selected runs (all when none is) as the controls say."""
        if self.table is None or not len(self.table):
            self.plot.children = []
            if self.table is not None:
                self._say(f"no runs in {html.escape(str(self.store))} yet.")
            return
        chosen = self.table.iloc[sorted(self.source.selected.indices)] if self.source.selected.indices else self.table
        by = None if self.group_by.value == PER_RUN else self.group_by.value
        try:
            comparison = compare(
                chosen, by=by, metric=self.metric.value, x=self.x_axis.value, store=self.store, reps=1000
            )
        except Exception as exc:  # noqa: BLE001 - a metric the runs lack is said, not raised
            self.plot.children = []
            self._say(str(exc))
            return
        self.plot.children = [comparison.figure]
        self._say(f"{len(chosen)} of {len(self.table)} runs" + (f", grouped by {by}" if by else ""), plain=True)

    def _say(self, text: str, *, plain: bool = False) -> None:
        color = "#555" if plain else "#b00"
        self.message.text = f"<span style='color:{color}'>{html.escape(text)}</span>"


def _cell(value):
    """A table cell: numbers as they are, the rest as text (Bokeh's table has no None)."""
    if hasattr(value, "item"):  # a NumPy number
        value = value.item()
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def runs_doc(scheduler, extra, doc) -> None:
    """The ``/workbench-runs`` page (with the dashboard's menu bar)."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    page = RunsPage()
    doc.add_root(page.root)
    doc.title = "Dask: workbench runs"
    doc.theme = BOKEH_THEME
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
