"""A "workbench" page on the Dask dashboard: where a run's time goes, live.

Each replica loop reports every finished task to the driver, which passes the reports on
in batches to the scheduler topic ``workbench-<run_id>`` (see
:mod:`workbench.cluster.report_relay`). The scheduler keeps the latest events of every
topic; this page reads them every 500 ms (only the new ones) and shows, for the latest run
(or one picked in the "Run" menu):

* per replica (a group of fused fragments on one worker): seconds in compute per
  fragment, seconds waiting for inputs, seconds sending outputs, and bytes sent;
* env-steps/s over time and the return curve (metric ``charts/episodic_return``);
* a table of the run's groups, replicas and workers.

Routes: ``/workbench`` (full page, with the dashboard's menu bar) and
``/individual-workbench`` (the bare plots; listed in the dashboard's "More..." menu and in
``/individual-plots.json``, which is how dask-labextension offers it as a JupyterLab pane).

Registering: Bokeh routes are fixed when the scheduler's HTTP server starts, so the page
must be in ``distributed.dashboard.scheduler.applications`` before that. Importing this
module registers it (:func:`install`): the embedded ``LocalCluster`` imports it before it
starts, and a remote scheduler does so with ``dask scheduler --preload
workbench.cluster.dashboard`` (preload modules are imported before the dashboard starts;
:func:`dask_setup` then only checks and logs the page's address).

BokehJS comes from the scheduler's own Bokeh server: nothing is fetched from a CDN.
"""

from __future__ import annotations

import html
import logging
import math
import time

from workbench.cluster._dask_compat import TOPIC_PREFIX
from workbench.cluster.dashboard_model import (  # noqa: F401
    BYTES_COLOR,
    EventCursor,
    ReplicaStats,
    RunState,
    log_length,
    run_key,
    workbench_topics,
)
from workbench.fdg.plan import human_bytes
from workbench.runtime.state.run import DEFAULT_UNIT, RETURN_METRIC, headline_text, rate_label

#: the curve's title while it plots the return
RETURN_TITLE = f"Return ({RETURN_METRIC}): mean per iteration, min–max band, episodes"

__all__ = [
    "INDIVIDUAL_ROUTE",
    "ROUTE",
    "RunState",
    "TOPIC_PREFIX",
    "dask_setup",
    "install",
    "individual_workbench_doc",
    "workbench_doc",
]

logger = logging.getLogger(__name__)

ROUTE = "/workbench"
INDIVIDUAL_ROUTE = "/individual-workbench"
UPDATE_MS = 500

# ---------------------------------------------------------------------------------------
# The Bokeh page
# ---------------------------------------------------------------------------------------


class WorkbenchPage:
    """One browser session's view: Bokeh models plus the run state they show."""

    def __init__(self, scheduler, *, standalone: bool) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import (
            ColumnDataSource,
            DataTable,
            Div,
            FactorRange,
            HoverTool,
            NumberFormatter,
            NumeralTickFormatter,
            Select,
            StringFormatter,
            TableColumn,
        )
        from bokeh.plotting import figure

        self.scheduler = scheduler
        self.cursors: dict[str, EventCursor] = {}
        #: topic → the run it belongs to (decided at its first events: a run's later
        #: stretches have topics of their own)
        self.run_of: dict[str, str] = {}
        #: run key → its state, over all its stretches; the menu lists runs, not topics
        self.states: dict[str, RunState] = {}
        self.first_seen: dict[str, float] = {}
        self.follow_latest = True
        self.shown: str | None = None
        self._dirty = True

        self.header = Div(text="", sizing_mode="stretch_width", styles={"font-size": "14px"})
        self.select = Select(title="Run", options=[], value="", width=260)
        self.select.on_change("value", self._on_select)

        self.time_source = ColumnDataSource(
            {k: [] for k in ("replica", "segment", "left", "right", "seconds", "share", "color")}
        )
        self.bytes_source = ColumnDataSource({"replica": [], "bytes": [], "text": [], "tasks": []})
        self.rate_source = ColumnDataSource({"t": [], "rate": []})
        self.curve_source = ColumnDataSource({"iteration": [], "mean": [], "low": [], "high": [], "episodes": []})
        self.episodes_source = ColumnDataSource({"iteration": [], "value": []})
        self.table_source = ColumnDataSource(
            {
                k: []
                for k in (
                    "group",
                    "replica",
                    "worker",
                    "address",
                    "tasks",
                    "iteration",
                    "env_steps",
                    "compute",
                    "wait",
                    "send",
                    "bytes",
                    "last",
                )
            }
        )

        self.replica_range = FactorRange(factors=[])
        tools = "pan,wheel_zoom,box_zoom,reset,save"
        self.time_fig = figure(
            title="Where each replica's time goes (seconds: compute per fragment, waiting, sending)",
            y_range=self.replica_range,
            height=300,
            sizing_mode="stretch_width",
            tools=tools,
            toolbar_location="above",
            x_axis_label="seconds",
        )
        self.time_fig.hbar(
            y="replica",
            left="left",
            right="right",
            height=0.7,
            color="color",
            line_color="white",
            legend_field="segment",
            source=self.time_source,
        )
        self.time_fig.add_tools(
            HoverTool(
                tooltips=[
                    ("replica", "@replica"),
                    ("", "@segment"),
                    ("seconds", "@seconds{0.000}"),
                    ("share", "@share{0.0%}"),
                ]
            )
        )
        legend = self.time_fig.legend[0]
        legend.label_text_font_size = "12px"
        legend.border_line_alpha = 0
        self.time_fig.add_layout(legend, "right")

        self.bytes_fig = figure(
            title="Bytes sent to other processes",
            y_range=self.replica_range,
            height=300,
            width=340,
            tools=tools,
            toolbar_location="above",
            x_axis_label="bytes",
        )
        self.bytes_fig.hbar(y="replica", right="bytes", height=0.7, color=BYTES_COLOR, source=self.bytes_source)
        self.bytes_fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.bytes_fig.yaxis.visible = False
        self.bytes_fig.xaxis.ticker.desired_num_ticks = 4
        self.bytes_fig.add_tools(HoverTool(tooltips=[("replica", "@replica"), ("sent", "@text"), ("tasks", "@tasks")]))

        self.rate_fig = figure(
            title="Env steps per second",
            height=280,
            sizing_mode="stretch_width",
            tools=tools,
            toolbar_location="above",
            x_axis_label="seconds since the run's first task",
            y_axis_label="env-steps/s",
        )
        self.rate_fig.line("t", "rate", source=self.rate_source, line_width=2, color="#1f77b4")
        self.rate_fig.varea(x="t", y1=0, y2="rate", source=self.rate_source, fill_alpha=0.15, fill_color="#1f77b4")
        self.rate_fig.y_range.start = 0
        self.rate_fig.add_tools(HoverTool(tooltips=[("t", "@t{0.0} s"), ("env-steps/s", "@rate{0,0}")], mode="vline"))

        self.return_fig = figure(
            title=RETURN_TITLE,
            height=280,
            sizing_mode="stretch_width",
            tools=tools,
            toolbar_location="above",
            x_axis_label="iteration",
            y_axis_label="episodic return",
        )
        self.return_fig.varea(
            x="iteration", y1="low", y2="high", source=self.curve_source, fill_alpha=0.15, fill_color="#2ca02c"
        )
        self.return_fig.scatter("iteration", "value", source=self.episodes_source, size=3, alpha=0.25, color="#2ca02c")
        mean = self.return_fig.line("iteration", "mean", source=self.curve_source, line_width=2, color="#2ca02c")
        self.return_fig.add_tools(
            HoverTool(
                renderers=[mean],
                mode="vline",
                tooltips=[
                    ("iteration", "@iteration"),
                    ("mean", "@mean{0.00}"),
                    ("min", "@low{0.00}"),
                    ("max", "@high{0.00}"),
                    ("episodes", "@episodes"),
                ],
            )
        )

        secs = NumberFormatter(format="0.000")
        # titled after the run's unit (--unit) once the page knows it, as the rate plot
        self._steps_column = TableColumn(
            field="env_steps", title=DEFAULT_UNIT, width=80, formatter=NumberFormatter(format="0,0")
        )
        self._unit = DEFAULT_UNIT
        cols = [
            TableColumn(field="group", title="group", width=120),
            TableColumn(field="replica", title="replica", width=60),
            TableColumn(field="worker", title="worker", width=70),
            TableColumn(field="address", title="address", width=170),
            TableColumn(field="tasks", title="tasks", width=60),
            TableColumn(field="iteration", title="last iteration", width=90),
            self._steps_column,
            TableColumn(field="compute", title="compute s", width=80, formatter=secs),
            TableColumn(field="wait", title="wait s", width=80, formatter=secs),
            TableColumn(field="send", title="send s", width=80, formatter=secs),
            TableColumn(field="bytes", title="sent", width=80, formatter=StringFormatter()),
            TableColumn(field="last", title="last report", width=90, formatter=StringFormatter()),
        ]
        self.table = DataTable(
            source=self.table_source, columns=cols, height=170, index_position=None, sizing_mode="stretch_width"
        )
        self._table_version = 0  # bumped with each new table data: see _refresh
        table_title = Div(text="<b>Groups, replicas and workers</b>", sizing_mode="stretch_width")

        top = row(self.header, self.select, sizing_mode="stretch_width")
        self.root = column(
            top,
            row(self.time_fig, self.bytes_fig, sizing_mode="stretch_width"),
            row(self.rate_fig, self.return_fig, sizing_mode="stretch_width"),
            table_title,
            self.table,
            sizing_mode="stretch_width",
            styles={"padding": "4px 12px"} if standalone else {},
        )
        self.update()

    # -- callbacks -----------------------------------------------------------------------
    def _on_select(self, attr, old, new) -> None:
        if new and new != self.shown:
            self.follow_latest = new == self._latest()
            self.shown = new
            self._dirty = True
            self.update()

    def _latest(self) -> str | None:
        return max(self.first_seen, key=self.first_seen.get) if self.first_seen else None

    def update(self) -> None:
        try:
            self._update()
        except Exception:  # a broken update must not kill the session's callback
            logger.exception("workbench dashboard page: update failed")

    def _update(self) -> None:
        topics = workbench_topics(self.scheduler)
        for gone in [t for t in self.cursors if t not in topics]:
            # the scheduler forgot an old stretch (it keeps the newest few): so does the page,
            # and of a run none of whose topics is left (unless it is the one shown)
            self.cursors.pop(gone)
            key = self.run_of.pop(gone, None)
            if key is not None and key != self.shown and key not in self.run_of.values():
                self.states.pop(key, None)
                self.first_seen.pop(key, None)
        for topic in topics:  # in the order the scheduler made them: a run's stretches in order
            cursor = self.cursors.setdefault(topic, EventCursor())
            first_read = cursor.last_ts == -math.inf
            fresh = cursor.new(self.scheduler.get_events(topic))
            if not fresh:
                continue
            key = self.run_of.get(topic)
            if key is None:
                key = self.run_of[topic] = run_key(topic[len(TOPIC_PREFIX) :], fresh)
            state = self.states.get(key)
            if state is None:
                state = self.states[key] = RunState(key)
            if first_read and len(fresh) >= log_length():
                state.truncated = True
            state.absorb(fresh)
            if state.t0 is not None:
                self.first_seen.setdefault(key, state.t0)
            if key == self.shown:
                self._dirty = True
        options = [(t, self._run_label(t)) for t in sorted(self.first_seen, key=self.first_seen.get, reverse=True)]
        if options != [tuple(o) for o in self.select.options]:
            self.select.options = options
        latest = self._latest()
        if latest is not None and (self.shown is None or (self.follow_latest and latest != self.shown)):
            self.shown = latest
            self._dirty = True
        if self.shown is not None and self.select.value != self.shown:
            self.select.value = self.shown
        state = self.states.get(self.shown) if self.shown else None
        if state is None:
            self._empty()
            return
        self._refresh_header(state)
        if self._dirty:
            self._dirty = False
            self._refresh(state)

    def _run_label(self, key: str) -> str:
        t0 = self.first_seen.get(key)
        stamp = time.strftime("%H:%M:%S", time.localtime(t0)) if t0 else "?"
        return f"{key} (started {stamp})"

    def _empty(self) -> None:
        self.header.text = (
            "<h2 style='margin:4px 0'>workbench</h2><p>No workbench run on this cluster yet: "
            "the page fills in as soon as a run's replicas finish their first tasks "
            f"(Dask events <code>{TOPIC_PREFIX}&lt;run id&gt;</code>).</p>"
        )

    def _name_the_steps(self, unit: str) -> None:
        """The rate plot's axis and the table column say the run's unit (``--unit
        completions``); :meth:`_refresh` titles the plot."""
        if unit != self._unit:
            self._unit = unit
            self.rate_fig.yaxis.axis_label = rate_label(unit)
            self._steps_column.title = unit

    def _refresh_header(self, state: RunState) -> None:
        self._name_the_steps(state.unit)
        now = time.time()
        since = now - state.t_last if state.t_last else 0.0
        live = since < 5.0
        rate = state.env_steps / state.elapsed if state.elapsed > 0 else 0.0
        rets = state.returns.get(max(state.returns)) if state.returns else None
        last_return = f"{sum(rets) / len(rets):.2f}" if rets else "–"
        headline = headline_text(state.headline())  # what the cells log with prog_bar=True
        # the last return, and the prog_bar metrics; a run without episodes (GRPO) shows only the latter
        learning = (f"<div>last return <b>{last_return}</b></div>" if rets or not headline else "") + (
            f"<div>{html.escape(headline)}</div>" if headline else ""
        )
        current = state.current_replicas()  # the placement it runs under now
        groups = sorted({s.group for s in current})
        colors = state.fragment_colors()
        chips = " ".join(
            f"<span style='background:{c};color:white;border-radius:3px;padding:1px 6px;margin-right:3px'>{f}</span>"
            for f, c in colors.items()
        )
        status = (
            "<span style='color:#2ca02c'>● live</span>"
            if live
            else f"<span style='color:#888'>● idle ({since:.0f} s since last report)</span>"
        )
        self.header.text = (
            f"<h2 style='margin:4px 0'>workbench run <code>{state.run_id}</code> {status}</h2>"
            "<div style='display:flex;gap:22px;flex-wrap:wrap'>"
            f"<div><b>{state.iterations_done}</b> iterations</div>"
            f"<div><b>{state.env_steps:,}</b> {html.escape(state.unit)}</div>"
            f"<div><b>{rate:,.0f}</b> {html.escape(rate_label(state.unit))} (mean)</div>"
            f"<div><b>{state.elapsed:.1f} s</b> elapsed</div>"
            f"{learning}"
            f"<div><b>{len(current)}</b> replicas in {len(groups)} groups: {', '.join(groups)}</div>"
            f"</div><div style='margin-top:4px'>fragments: {chips}</div>"
            + (
                f"<div class='wb-changed' style='margin-top:4px;color:#555'>changed while training at "
                f"iteration{'s' if len(state.changed_at) > 1 else ''} {', '.join(map(str, state.changed_at))} "
                "(re-placed, edited or updated): one run, its totals over all of it</div>"
                if state.changed_at
                else ""
            )
            + "".join(
                f"<div style='color:#c62828;margin-top:4px'>⚠ {html.escape(kind)} "
                f"(iteration {iteration}): {html.escape(message)}</div>"
                for kind, message, iteration in state.run_events
            )
            + (
                "<div style='color:#b35900;margin-top:4px'>⚠ opened late: totals cover only the tasks "
                "after the scheduler's oldest kept event (it keeps the last "
                f"{log_length():,} per run: <code>distributed.admin.low-level-log-length</code>)</div>"
                if state.truncated
                else ""
            )
        )

    def _refresh(self, state: RunState) -> None:
        replicas = state.ordered_replicas()
        labels = [s.label for s in replicas]
        if list(self.replica_range.factors) != labels:
            self.replica_range.factors = labels
        self.time_source.data = state.time_segments()
        self.bytes_source.data = {
            "replica": labels,
            "bytes": [s.sent_bytes for s in replicas],
            "text": [human_bytes(s.sent_bytes) for s in replicas],
            "tasks": [s.tasks for s in replicas],
        }
        t, rate, window = state.step_rate()
        self.rate_source.data = {"t": t, "rate": rate}
        per_second = f"{state.unit[:1].upper()}{state.unit[1:]} per second"  # "Env steps per second"
        self.rate_fig.title.text = f"{per_second} (sliding {window:.2g} s window)" if t else per_second
        curve, episodes = state.return_curve()
        metric = state.curve_metric
        # no episode has ended: the first metric the cells log with prog_bar=True (GRPO's reward)
        title = RETURN_TITLE if metric == RETURN_METRIC else f"{metric}: mean per iteration, min–max band"
        if self.return_fig.title.text != title:
            self.return_fig.title.text = title
            self.return_fig.yaxis.axis_label = "episodic return" if metric == RETURN_METRIC else metric
        self.curve_source.data = curve
        self.episodes_source.data = episodes
        self.table_source.data = {
            "group": [s.group for s in replicas],
            "replica": [s.replica for s in replicas],
            "worker": [s.worker for s in replicas],
            "address": [s.address for s in replicas],
            "tasks": [s.tasks for s in replicas],
            "iteration": [s.last_iteration if s.last_iteration >= 0 else "–" for s in replicas],
            "env_steps": [s.env_steps for s in replicas],
            "compute": [s.compute_total for s in replicas],
            "wait": [s.wait for s in replicas],
            "send": [s.send for s in replicas],
            "bytes": [human_bytes(s.sent_bytes) for s in replicas],
            "last": [time.strftime("%H:%M:%S", time.localtime(s.last_seen)) for s in replicas],
        }
        # BokehJS redraws a DataTable when its source's row *indices* change, and new data
        # with as many rows has the same indices: the table kept its first values (and the
        # previous run's rows in the next run of as many replicas). A change of the table
        # model itself makes the browser draw it again from the new data.
        self._table_version += 1
        self.table.tags = [self._table_version]


def _make_doc(scheduler, extra, doc, *, standalone: bool) -> None:
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    page = WorkbenchPage(scheduler, standalone=standalone)
    doc.add_periodic_callback(page.update, UPDATE_MS)
    doc.add_root(page.root)
    doc.title = "Dask: workbench"
    doc.theme = BOKEH_THEME
    if standalone:
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)


def workbench_doc(scheduler, extra, doc) -> None:
    """The ``/workbench`` page (with the dashboard's menu bar)."""
    _make_doc(scheduler, extra, doc, standalone=True)


def individual_workbench_doc(scheduler, extra, doc) -> None:
    """The ``/individual-workbench`` page: the same plots, no menu bar (JupyterLab pane)."""
    _make_doc(scheduler, extra, doc, standalone=False)


# ---------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------


def install() -> bool:
    """Add the pages to the scheduler dashboard's routes (idempotent).

    Takes effect for schedulers whose dashboard starts afterwards; False when the dashboard
    is unavailable (no bokeh).
    """
    try:
        from distributed.dashboard import scheduler as dashboard
    except ImportError:
        return False
    dashboard.applications.setdefault(ROUTE, workbench_doc)
    dashboard.applications.setdefault(INDIVIDUAL_ROUTE, individual_workbench_doc)
    from workbench.cluster.dashboard_runs import RUNS_ROUTE, runs_doc

    dashboard.applications.setdefault(RUNS_ROUTE, runs_doc)  # the run store's runs, compared
    return True


def _served_paths(scheduler) -> set[str]:
    for app in getattr(getattr(scheduler, "http_application", None), "applications", ()):
        if hasattr(app, "app_paths"):
            return {p.rstrip("/") for p in app.app_paths}
    return set()


def dask_setup(scheduler) -> None:
    """Preload hook (``dask scheduler --preload workbench.cluster.dashboard``).

    The import already registered the page, before the scheduler's dashboard started; this
    checks it is served and logs where.
    """
    from distributed import Scheduler

    if not isinstance(scheduler, Scheduler):
        logger.warning("workbench.cluster.dashboard is a scheduler preload; ignored on %s", type(scheduler).__name__)
        return
    paths = _served_paths(scheduler)
    if not paths:
        logger.warning("workbench dashboard page: this scheduler has no dashboard (is bokeh installed?)")
    elif not any(p.endswith(ROUTE) for p in paths):
        logger.warning(
            "workbench dashboard page: imported after the dashboard started, so not served; "
            "load it with --preload workbench.cluster.dashboard"
        )
    else:
        port = scheduler.http_server.port if scheduler.http_server is not None else "?"
        logger.info("workbench dashboard page at http://<scheduler host>:%s%s", port, ROUTE)


install()
