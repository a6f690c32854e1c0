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

import logging
import math
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from workbench.cluster._dask_compat import TOPIC_PREFIX, workbench_topic_names
from workbench.cluster.report_events import report_fields
from workbench.cluster.report_relay import batch_items
from workbench.fdg.plan import human_bytes
from workbench.runtime.run import RETURN_METRIC

__all__ = ["INDIVIDUAL_ROUTE", "ROUTE", "RunState", "TOPIC_PREFIX", "dask_setup", "install",
           "individual_workbench_doc", "workbench_doc"]

logger = logging.getLogger(__name__)

ROUTE = "/workbench"
INDIVIDUAL_ROUTE = "/individual-workbench"
UPDATE_MS = 500

# Category10 without its grey (kept for waiting) — one colour per fragment
FRAGMENT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                   "#e377c2", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a")
WAIT_COLOR = "#c7c7c7"
SEND_COLOR = "#525252"
BYTES_COLOR = "#6b6ecf"


# ---------------------------------------------------------------------------------------
# The model: plain Python, no Bokeh (testable without a browser)
# ---------------------------------------------------------------------------------------

class EventCursor:
    """Picks the events of one topic not seen yet.

    The scheduler keeps a bounded deque per topic (``distributed.admin.low-level-log-length``),
    so positions shift once it is full; the timestamps (non-decreasing) are the cursor.
    """

    def __init__(self) -> None:
        self.last_ts = -math.inf
        self.seen_at_last = 0  # how many events stamped exactly last_ts were read

    def new(self, events: Sequence[tuple[float, Any]]) -> Sequence[tuple[float, Any]]:
        i = len(events)
        while i > 0 and events[i - 1][0] > self.last_ts:
            i -= 1
        j = i
        while j > 0 and events[j - 1][0] == self.last_ts:
            j -= 1
        start = j + self.seen_at_last if i - j > self.seen_at_last else i
        fresh = events[start:]
        if fresh:
            last = events[-1][0]
            tied = 0
            for ts, _ in reversed(events):
                if ts != last:
                    break
                tied += 1
            self.last_ts, self.seen_at_last = last, tied
        return fresh


@dataclass
class ReplicaStats:
    group: str
    replica: int
    worker: str = ""
    address: str = ""
    tasks: int = 0
    compute: dict[str, float] = field(default_factory=dict)
    wait: float = 0.0
    send: float = 0.0
    sent_bytes: int = 0
    last_iteration: int = -1
    env_steps: int = 0
    last_seen: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.group} [{self.replica}] · worker {self.worker}"

    @property
    def compute_total(self) -> float:
        return sum(self.compute.values())


class RunState:
    """Everything the page shows for one run, accumulated from its events."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.t0: float | None = None
        self.t_last: float | None = None
        self.replicas: dict[tuple[str, int], ReplicaStats] = {}
        self.fragments: set[str] = set()
        self.returns: dict[int, list[float]] = {}
        self.step_times: list[float] = []   # event time (s since t0) of each report with env steps
        self.step_cumsum: list[int] = []     # env steps done up to and including that report
        self.events = 0
        #: the scheduler had already dropped this run's oldest events when the page first read it
        self.truncated = False

    # -- absorbing -----------------------------------------------------------------------
    def absorb(self, events: Iterable[tuple[float, Any]]) -> int:
        n = 0
        for stamped, message in events:
            for ts, msg in batch_items(stamped, message):  # the driver relays reports in batches
                rep = report_fields(msg)
                if rep is not None:
                    self._absorb_one(float(ts), msg, rep)
                    n += 1
        return n

    def _absorb_one(self, ts: float, msg: dict, rep: dict) -> None:
        if self.t0 is None:
            self.t0 = ts
        self.t_last = ts if self.t_last is None else max(self.t_last, ts)
        self.events += 1
        key = (str(rep.get("group", "?")), int(rep.get("replica", 0)))
        stats = self.replicas.get(key)
        if stats is None:
            stats = self.replicas[key] = ReplicaStats(*key)
        stats.worker = str(rep.get("worker", stats.worker))
        stats.address = str(msg.get("worker", stats.address))
        stats.tasks += 1
        stats.last_seen = ts
        for frag, seconds in (rep.get("compute_seconds") or {}).items():
            stats.compute[frag] = stats.compute.get(frag, 0.0) + float(seconds)
            self.fragments.add(frag)
        stats.wait += float(rep.get("wait_seconds") or 0.0)
        stats.send += float(rep.get("send_seconds") or 0.0)
        stats.sent_bytes += int(rep.get("sent_bytes") or 0)
        if rep.get("iterations"):
            stats.last_iteration = max(stats.last_iteration, max(int(i) for i in rep["iterations"]))
        steps = sum(int(n) for n in (rep.get("env_steps") or {}).values())
        if steps:
            stats.env_steps += steps
            self.step_times.append(ts - self.t0)
            self.step_cumsum.append((self.step_cumsum[-1] if self.step_cumsum else 0) + steps)
        for it, metrics in (rep.get("metrics") or {}).items():
            values = (metrics or {}).get(RETURN_METRIC)
            if values:
                self.returns.setdefault(int(it), []).extend(float(v) for v in values)

    # -- views ---------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return 0.0 if self.t0 is None or self.t_last is None else self.t_last - self.t0

    @property
    def env_steps(self) -> int:
        return self.step_cumsum[-1] if self.step_cumsum else 0

    @property
    def iterations_done(self) -> int:
        """Iterations every group has finished (the slowest group's count)."""
        by_group: dict[str, int] = {}
        for s in self.replicas.values():
            if s.last_iteration >= 0 or s.group not in by_group:
                by_group[s.group] = max(by_group.get(s.group, -1), s.last_iteration)
        done = [v for v in by_group.values() if v >= 0]
        return (min(done) + 1) if done else 0

    def fragment_colors(self) -> dict[str, str]:
        return {f: FRAGMENT_COLORS[i % len(FRAGMENT_COLORS)] for i, f in enumerate(sorted(self.fragments))}

    def ordered_replicas(self) -> list[ReplicaStats]:
        return [self.replicas[k] for k in sorted(self.replicas)]

    def time_segments(self) -> dict[str, list]:
        """One horizontal bar segment per (replica, compute-per-fragment | waiting | sending)."""
        colors = self.fragment_colors()
        out: dict[str, list] = {k: [] for k in ("replica", "segment", "left", "right", "seconds", "share", "color")}
        for s in self.ordered_replicas():
            parts = [(f, s.compute.get(f, 0.0), colors[f]) for f in sorted(s.compute)]
            parts += [("waiting", s.wait, WAIT_COLOR), ("sending", s.send, SEND_COLOR)]
            total = sum(p[1] for p in parts) or 1.0
            left = 0.0
            for name, seconds, color in parts:
                out["replica"].append(s.label)
                out["segment"].append(name if name in ("waiting", "sending") else f"compute: {name}")
                out["left"].append(left)
                out["right"].append(left + seconds)
                out["seconds"].append(seconds)
                out["share"].append(seconds / total)
                out["color"].append(color)
                left += seconds
        return out

    def step_rate(self, points: int = 120) -> tuple[list[float], list[float], float]:
        """env-steps/s on a regular time grid, over a sliding window; returns (t, rate, window)."""
        if not self.step_times:
            return [], [], 0.0
        end = max(self.elapsed, self.step_times[-1])
        window = min(10.0, max(0.05, end / 10)) if end > 0 else 0.05
        n = max(2, min(points, int(end / (window / 4)) + 2))
        ts, rates = [], []
        for k in range(n):
            t = end * k / (n - 1)
            lo = max(0.0, t - window)
            span = t - lo
            if span <= 0:
                continue
            done_t = self._steps_at(t)
            done_lo = self._steps_at(lo)
            ts.append(t)
            rates.append((done_t - done_lo) / span)
        return ts, rates, window

    def _steps_at(self, t: float) -> int:
        i = bisect_right(self.step_times, t)
        return self.step_cumsum[i - 1] if i else 0

    def return_curve(self, max_points: int = 5000) -> tuple[dict[str, list], dict[str, list]]:
        """(per-iteration mean, min, max) and the individual episodes (the latest max_points)."""
        its = sorted(self.returns)
        curve = {"iteration": its,
                 "mean": [sum(self.returns[i]) / len(self.returns[i]) for i in its],
                 "low": [min(self.returns[i]) for i in its],
                 "high": [max(self.returns[i]) for i in its],
                 "episodes": [len(self.returns[i]) for i in its]}
        xs, ys = [], []
        for i in reversed(its):
            vals = self.returns[i]
            xs.extend([i] * len(vals))
            ys.extend(vals)
            if len(xs) >= max_points:
                break
        return curve, {"iteration": xs, "value": ys}


def workbench_topics(scheduler) -> list[str]:
    """The scheduler's event topics of workbench runs (without copying their events)."""
    return workbench_topic_names(scheduler)


def _log_length() -> int:
    import dask

    return int(dask.config.get("distributed.admin.low-level-log-length", 1000) or 1000)


# ---------------------------------------------------------------------------------------
# The Bokeh page
# ---------------------------------------------------------------------------------------

class WorkbenchPage:
    """One browser session's view: Bokeh models plus the run state they show."""

    def __init__(self, scheduler, *, standalone: bool) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import (ColumnDataSource, DataTable, Div, FactorRange, HoverTool,
                                  NumberFormatter, NumeralTickFormatter, Select, StringFormatter,
                                  TableColumn)
        from bokeh.plotting import figure

        self.scheduler = scheduler
        self.cursors: dict[str, EventCursor] = {}
        self.states: dict[str, RunState] = {}
        self.first_seen: dict[str, float] = {}
        self.follow_latest = True
        self.shown: str | None = None
        self._dirty = True

        self.header = Div(text="", sizing_mode="stretch_width", styles={"font-size": "14px"})
        self.select = Select(title="Run", options=[], value="", width=260)
        self.select.on_change("value", self._on_select)

        self.time_source = ColumnDataSource({k: [] for k in ("replica", "segment", "left", "right", "seconds", "share", "color")})
        self.bytes_source = ColumnDataSource({"replica": [], "bytes": [], "text": [], "tasks": []})
        self.rate_source = ColumnDataSource({"t": [], "rate": []})
        self.curve_source = ColumnDataSource({"iteration": [], "mean": [], "low": [], "high": [], "episodes": []})
        self.episodes_source = ColumnDataSource({"iteration": [], "value": []})
        self.table_source = ColumnDataSource({k: [] for k in (
            "group", "replica", "worker", "address", "tasks", "iteration", "env_steps", "compute",
            "wait", "send", "bytes", "last")})

        self.replica_range = FactorRange(factors=[])
        tools = "pan,wheel_zoom,box_zoom,reset,save"
        self.time_fig = figure(title="Where each replica's time goes (seconds: compute per fragment, waiting, sending)",
                               y_range=self.replica_range, height=300, sizing_mode="stretch_width",
                               tools=tools, toolbar_location="above", x_axis_label="seconds")
        self.time_fig.hbar(y="replica", left="left", right="right", height=0.7, color="color",
                           line_color="white", legend_field="segment", source=self.time_source)
        self.time_fig.add_tools(HoverTool(tooltips=[("replica", "@replica"), ("", "@segment"),
                                                    ("seconds", "@seconds{0.000}"), ("share", "@share{0.0%}")]))
        legend = self.time_fig.legend[0]
        legend.label_text_font_size = "12px"
        legend.border_line_alpha = 0
        self.time_fig.add_layout(legend, "right")

        self.bytes_fig = figure(title="Bytes sent to other processes", y_range=self.replica_range,
                                height=300, width=340, tools=tools, toolbar_location="above",
                                x_axis_label="bytes")
        self.bytes_fig.hbar(y="replica", right="bytes", height=0.7, color=BYTES_COLOR, source=self.bytes_source)
        self.bytes_fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.bytes_fig.yaxis.visible = False
        self.bytes_fig.xaxis.ticker.desired_num_ticks = 4
        self.bytes_fig.add_tools(HoverTool(tooltips=[("replica", "@replica"), ("sent", "@text"), ("tasks", "@tasks")]))

        self.rate_fig = figure(title="Env steps per second", height=280, sizing_mode="stretch_width",
                               tools=tools, toolbar_location="above", x_axis_label="seconds since the run's first task",
                               y_axis_label="env-steps/s")
        self.rate_fig.line("t", "rate", source=self.rate_source, line_width=2, color="#1f77b4")
        self.rate_fig.varea(x="t", y1=0, y2="rate", source=self.rate_source, fill_alpha=0.15, fill_color="#1f77b4")
        self.rate_fig.y_range.start = 0
        self.rate_fig.add_tools(HoverTool(tooltips=[("t", "@t{0.0} s"), ("env-steps/s", "@rate{0,0}")], mode="vline"))

        self.return_fig = figure(title=f"Return ({RETURN_METRIC}): mean per iteration, min–max band, episodes",
                                 height=280, sizing_mode="stretch_width", tools=tools, toolbar_location="above",
                                 x_axis_label="iteration", y_axis_label="episodic return")
        self.return_fig.varea(x="iteration", y1="low", y2="high", source=self.curve_source,
                              fill_alpha=0.15, fill_color="#2ca02c")
        self.return_fig.scatter("iteration", "value", source=self.episodes_source, size=3, alpha=0.25, color="#2ca02c")
        mean = self.return_fig.line("iteration", "mean", source=self.curve_source, line_width=2, color="#2ca02c")
        self.return_fig.add_tools(HoverTool(renderers=[mean], mode="vline", tooltips=[
            ("iteration", "@iteration"), ("mean", "@mean{0.00}"), ("min", "@low{0.00}"),
            ("max", "@high{0.00}"), ("episodes", "@episodes")]))

        secs = NumberFormatter(format="0.000")
        cols = [TableColumn(field="group", title="group", width=120),
                TableColumn(field="replica", title="replica", width=60),
                TableColumn(field="worker", title="worker", width=70),
                TableColumn(field="address", title="address", width=170),
                TableColumn(field="tasks", title="tasks", width=60),
                TableColumn(field="iteration", title="last iteration", width=90),
                TableColumn(field="env_steps", title="env steps", width=80, formatter=NumberFormatter(format="0,0")),
                TableColumn(field="compute", title="compute s", width=80, formatter=secs),
                TableColumn(field="wait", title="wait s", width=80, formatter=secs),
                TableColumn(field="send", title="send s", width=80, formatter=secs),
                TableColumn(field="bytes", title="sent", width=80, formatter=StringFormatter()),
                TableColumn(field="last", title="last report", width=90, formatter=StringFormatter())]
        self.table = DataTable(source=self.table_source, columns=cols, height=170, index_position=None,
                               sizing_mode="stretch_width")
        self._table_version = 0  # bumped with each new table data: see _refresh
        table_title = Div(text="<b>Groups, replicas and workers</b>", sizing_mode="stretch_width")

        top = row(self.header, self.select, sizing_mode="stretch_width")
        self.root = column(top, row(self.time_fig, self.bytes_fig, sizing_mode="stretch_width"),
                           row(self.rate_fig, self.return_fig, sizing_mode="stretch_width"),
                           table_title, self.table,
                           sizing_mode="stretch_width", styles={"padding": "4px 12px"} if standalone else {})
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
        for gone in [t for t in self.cursors if t not in topics and t != self.shown]:
            # the scheduler forgot an old run (it keeps the newest few): so does the page
            self.cursors.pop(gone)
            self.states.pop(gone, None)
            self.first_seen.pop(gone, None)
        for topic in topics:
            if topic not in self.cursors:
                self.cursors[topic] = EventCursor()
                self.states[topic] = RunState(topic[len(TOPIC_PREFIX):])
        for topic in topics:
            cursor = self.cursors[topic]
            first_read = cursor.last_ts == -math.inf
            fresh = cursor.new(self.scheduler.get_events(topic))
            if fresh:
                state = self.states[topic]
                if first_read and len(fresh) >= _log_length():
                    state.truncated = True
                state.absorb(fresh)
                if state.t0 is not None:
                    self.first_seen.setdefault(topic, state.t0)
                if topic == self.shown:
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

    def _run_label(self, topic: str) -> str:
        t0 = self.first_seen.get(topic)
        stamp = time.strftime("%H:%M:%S", time.localtime(t0)) if t0 else "?"
        return f"{topic[len(TOPIC_PREFIX):]} (started {stamp})"

    def _empty(self) -> None:
        self.header.text = ("<h2 style='margin:4px 0'>workbench</h2><p>No workbench run on this cluster yet: "
                            "the page fills in as soon as a run's replicas finish their first tasks "
                            f"(Dask events <code>{TOPIC_PREFIX}&lt;run id&gt;</code>).</p>")

    def _refresh_header(self, state: RunState) -> None:
        now = time.time()
        since = now - state.t_last if state.t_last else 0.0
        live = since < 5.0
        rate = state.env_steps / state.elapsed if state.elapsed > 0 else 0.0
        rets = state.returns.get(max(state.returns)) if state.returns else None
        last_return = f"{sum(rets) / len(rets):.2f}" if rets else "–"
        groups = sorted({s.group for s in state.replicas.values()})
        colors = state.fragment_colors()
        chips = " ".join(f"<span style='background:{c};color:white;border-radius:3px;padding:1px 6px;"
                         f"margin-right:3px'>{f}</span>" for f, c in colors.items())
        status = ("<span style='color:#2ca02c'>● live</span>" if live
                  else f"<span style='color:#888'>● idle ({since:.0f} s since last report)</span>")
        self.header.text = (
            f"<h2 style='margin:4px 0'>workbench run <code>{state.run_id}</code> {status}</h2>"
            "<div style='display:flex;gap:22px;flex-wrap:wrap'>"
            f"<div><b>{state.iterations_done}</b> iterations</div>"
            f"<div><b>{state.env_steps:,}</b> env steps</div>"
            f"<div><b>{rate:,.0f}</b> env-steps/s (mean)</div>"
            f"<div><b>{state.elapsed:.1f} s</b> elapsed</div>"
            f"<div>last return <b>{last_return}</b></div>"
            f"<div><b>{len(state.replicas)}</b> replicas in {len(groups)} groups: {', '.join(groups)}</div>"
            f"</div><div style='margin-top:4px'>fragments: {chips}</div>"
            + ("<div style='color:#b35900;margin-top:4px'>⚠ opened late: totals cover only the tasks "
               "after the scheduler's oldest kept event (it keeps the last "
               f"{_log_length():,} per run: <code>distributed.admin.low-level-log-length</code>)</div>"
               if state.truncated else ""))

    def _refresh(self, state: RunState) -> None:
        replicas = state.ordered_replicas()
        labels = [s.label for s in replicas]
        if list(self.replica_range.factors) != labels:
            self.replica_range.factors = labels
        self.time_source.data = state.time_segments()
        self.bytes_source.data = {"replica": labels, "bytes": [s.sent_bytes for s in replicas],
                                  "text": [human_bytes(s.sent_bytes) for s in replicas],
                                  "tasks": [s.tasks for s in replicas]}
        t, rate, window = state.step_rate()
        self.rate_source.data = {"t": t, "rate": rate}
        self.rate_fig.title.text = f"Env steps per second (sliding {window:.2g} s window)" if t else "Env steps per second"
        curve, episodes = state.return_curve()
        self.curve_source.data = curve
        self.episodes_source.data = episodes
        self.table_source.data = {
            "group": [s.group for s in replicas], "replica": [s.replica for s in replicas],
            "worker": [s.worker for s in replicas], "address": [s.address for s in replicas],
            "tasks": [s.tasks for s in replicas],
            "iteration": [s.last_iteration if s.last_iteration >= 0 else "–" for s in replicas],
            "env_steps": [s.env_steps for s in replicas],
            "compute": [s.compute_total for s in replicas], "wait": [s.wait for s in replicas],
            "send": [s.send for s in replicas], "bytes": [human_bytes(s.sent_bytes) for s in replicas],
            "last": [time.strftime("%H:%M:%S", time.localtime(s.last_seen)) for s in replicas]}
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
        logger.warning("workbench dashboard page: imported after the dashboard started, so not served; "
                       "load it with --preload workbench.cluster.dashboard")
    else:
        port = scheduler.http_server.port if scheduler.http_server is not None else "?"
        logger.info("workbench dashboard page at http://<scheduler host>:%s%s", port, ROUTE)


install()
