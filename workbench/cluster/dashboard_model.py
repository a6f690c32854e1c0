"""The dashboard page's model: a run's scheduler events folded into what the page shows —
plain Python, no Bokeh, so it is tested without a browser (:mod:`workbench.cluster.dashboard`
draws it).

Besides replicas' task reports, a run's topic carries what happened to the run
(``{RUN_EVENT: {"kind", "message", "iteration"}}``, logged by the driver: a lost worker's
line, :mod:`workbench.runtime.engine.faults`); :attr:`RunState.run_events` keeps them in order,
except the one of kind :data:`UNIT_EVENT`, which names what the run's env steps are, and
the one of kind :data:`STRETCH_EVENT`, which names the run a topic belongs to.

A run is one or more *stretches* (a re-placement, a live edit or a lost worker ends one at
an iteration boundary and the next deploys anew), each on a topic of its own. A later
stretch's first event names its run's key (the first stretch's id), so the page shows one
entry per run, its totals over every stretch: :func:`run_key` decides which run a topic's
events belong to.

Example:
    >>> state = RunState("abc")
    >>> state.absorb([(1.0, {RUN_EVENT: {"kind": "worker lost", "message": "worker w2 …", "iteration": 4}})])
    0
    >>> state.run_events
    [('worker lost', 'worker w2 …', 4)]
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from workbench.cluster._dask_compat import workbench_topic_names
from workbench.cluster.report_events import report_fields
from workbench.cluster.report_relay import batch_items
from workbench.runtime.state.run import DEFAULT_UNIT, RETURN_METRIC, merge_shown

__all__ = [
    "EventCursor",
    "ReplicaStats",
    "RunState",
    "RUN_EVENT",
    "UNIT_EVENT",
    "STRETCH_EVENT",
    "FRAGMENT_COLORS",
    "WAIT_COLOR",
    "SEND_COLOR",
    "BYTES_COLOR",
    "run_key",
    "workbench_topics",
    "log_length",
]

#: the key of a run event (not a report) on a run's topic
RUN_EVENT = "run_event"
#: a run event's kind that says what one env step is called (``--unit``), not a line to show
UNIT_EVENT = "unit"
#: a run event's kind that says which run a stretch's topic belongs to (its message: the
#: run's key; its iteration: where the stretch starts), not a line to show
STRETCH_EVENT = "stretch of"

# Category10 without its grey (kept for waiting) — one colour per fragment
FRAGMENT_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
)
WAIT_COLOR = "#c7c7c7"
SEND_COLOR = "#525252"
BYTES_COLOR = "#6b6ecf"


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


def _said(message: Any) -> dict | None:
    said = message.get(RUN_EVENT) if isinstance(message, dict) else None
    return said if isinstance(said, dict) else None


def run_key(topic_id: str, events: Iterable[tuple[float, Any]]) -> str:
    """The run a topic's events belong to: the key its stretch event names, else the
    topic's own id (a run of one stretch, or one from before stretches were named).

    >>> stretch = (2.0, {RUN_EVENT: {"kind": STRETCH_EVENT, "message": "a1", "iteration": 169}})
    >>> run_key("b2", [stretch, (2.5, {"batch": []})]), run_key("a1", [(1.0, {"batch": []})])
    ('a1', 'a1')
    """
    for _, message in events:
        said = _said(message)
        if said is not None and said.get("kind") == STRETCH_EVENT and said.get("message"):
            return str(said["message"])
    return topic_id


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
    """Everything the page shows for one run, accumulated from its events (those of every
    stretch's topic, in the order the stretches ran)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.t0: float | None = None
        self.t_last: float | None = None
        self.replicas: dict[tuple[str, int], ReplicaStats] = {}
        self.fragments: set[str] = set()
        self.returns: dict[int, list[float]] = {}
        #: metrics logged with prog_bar=True (``merge_shown``'s order) and their values per iteration:
        #: a run without episodes (GRPO) plots the first instead of the return
        self.shown: list[str] = []
        self.shown_values: dict[str, dict[int, list[float]]] = {}
        self.step_times: list[float] = []  # event time (s since t0) of each report with env steps
        self.step_cumsum: list[int] = []  # env steps done up to and including that report
        self.events = 0
        #: the scheduler had already dropped this run's oldest events when the page first read it
        self.truncated = False
        #: what happened to the run, in order: (kind, message, iteration) — a lost worker's line
        self.run_events: list[tuple[str, str, int | None]] = []
        #: what one env step is called (the run's ``--unit``)
        self.unit = DEFAULT_UNIT
        #: the iteration each stretch after the first started at (a re-placement, an edit…)
        self.changed_at: list[int] = []
        #: the groups the current stretch's replicas reported from, and the iterations every
        #: group had finished when it began (an earlier placement's groups report no more)
        self.current_groups: set[str] = set()
        self._done_before = 0

    # -- absorbing -----------------------------------------------------------------------
    def absorb(self, events: Iterable[tuple[float, Any]]) -> int:
        n = 0
        for stamped, message in events:
            said = _said(message)
            if said is not None and said.get("kind") == UNIT_EVENT:
                self.unit = str(said.get("message") or DEFAULT_UNIT)
                continue
            if said is not None and said.get("kind") == STRETCH_EVENT:
                self._begin_stretch(said.get("iteration"))
                continue
            if said is not None:
                self.run_events.append((str(said.get("kind", "")), str(said.get("message", "")), said.get("iteration")))
                continue
            for ts, msg in batch_items(stamped, message):  # the driver relays reports in batches
                rep = report_fields(msg)
                if rep is not None:
                    self._absorb_one(float(ts), msg, rep)
                    n += 1
        return n

    def _begin_stretch(self, iteration: Any) -> None:
        """A later stretch of the run begins: its totals go on; its groups are the current ones."""
        self._done_before = self.iterations_done
        self.current_groups = set()
        if isinstance(iteration, int):
            self.changed_at.append(iteration)

    def _absorb_one(self, ts: float, msg: dict, rep: dict) -> None:
        if self.t0 is None:
            self.t0 = ts
        self.t_last = ts if self.t_last is None else max(self.t_last, ts)
        self.events += 1
        key = (str(rep.get("group", "?")), int(rep.get("replica", 0)))
        stats = self.replicas.get(key)
        if stats is None:
            stats = self.replicas[key] = ReplicaStats(*key)
        self.current_groups.add(key[0])
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
        self.shown = merge_shown(self.shown, [str(name) for name in rep.get("shown") or ()])
        for it, metrics in (rep.get("metrics") or {}).items():
            values = (metrics or {}).get(RETURN_METRIC)
            if values:
                self.returns.setdefault(int(it), []).extend(float(v) for v in values)
            for name in self.shown:
                values = (metrics or {}).get(name)
                if values:
                    self.shown_values.setdefault(name, {}).setdefault(int(it), []).extend(float(v) for v in values)

    # -- views ---------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return 0.0 if self.t0 is None or self.t_last is None else self.t_last - self.t0

    @property
    def env_steps(self) -> int:
        return self.step_cumsum[-1] if self.step_cumsum else 0

    @property
    def iterations_done(self) -> int:
        """Iterations every group of the current stretch has finished (the slowest group's
        count; iterations are numbered over the whole run)."""
        by_group: dict[str, int] = {}
        for s in self.replicas.values():
            if s.group in self.current_groups and (s.last_iteration >= 0 or s.group not in by_group):
                by_group[s.group] = max(by_group.get(s.group, -1), s.last_iteration)
        done = [v for v in by_group.values() if v >= 0]
        return max(self._done_before, (min(done) + 1) if done else 0)

    def current_replicas(self) -> list[ReplicaStats]:
        """The replicas of the current stretch's placement."""
        return [s for s in self.ordered_replicas() if s.group in self.current_groups]

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

    @property
    def curve_metric(self) -> str:
        """What the curve plots: the return, or (while no episode has ended) the first metric
        logged with prog_bar=True."""
        return RETURN_METRIC if self.returns or not self.shown else self.shown[0]

    def headline(self) -> list[tuple[str, float]]:
        """Each prog_bar metric's newest iteration's mean (``Run.headline`` on the page)."""
        return [
            (name, sum(by[max(by)]) / len(by[max(by)])) for name in self.shown if (by := self.shown_values.get(name))
        ]

    def return_curve(self, max_points: int = 5000) -> tuple[dict[str, list], dict[str, list]]:
        """(per-iteration mean, min, max) and the individual episodes (the latest max_points),
        of :attr:`curve_metric`."""
        series = self.returns if self.curve_metric == RETURN_METRIC else self.shown_values.get(self.curve_metric, {})
        its = sorted(series)
        curve = {
            "iteration": its,
            "mean": [sum(series[i]) / len(series[i]) for i in its],
            "low": [min(series[i]) for i in its],
            "high": [max(series[i]) for i in its],
            "episodes": [len(series[i]) for i in its],
        }
        xs, ys = [], []
        for i in reversed(its):
            vals = series[i]
            xs.extend([i] * len(vals))
            ys.extend(vals)
            if len(xs) >= max_points:
                break
        return curve, {"iteration": xs, "value": ys}


def workbench_topics(scheduler) -> list[str]:
    """The scheduler's event topics of workbench runs (without copying their events)."""
    return workbench_topic_names(scheduler)


def log_length() -> int:
    import dask

    return int(dask.config.get("distributed.admin.low-level-log-length", 1000) or 1000)
