"""The sweep's table: one row per trial, changed by the events trials report. Pure state.

The runner feeds it events (plain dicts, as trials send them) and draws it: as text on a
command line, as HTML in a notebook. Nothing here touches Dask or a display.

    >>> from workbench.sweep.grid import trial_grid
    >>> table = SweepTable(trial_grid({"cfg.lr": [1e-3]}, seeds=2), iterations=100)
    >>> table.apply({"trial": 0, "kind": "started", "where": "w1", "from_iteration": 0})
    >>> table.apply({"trial": 0, "kind": "progress", "iteration": 9, "return": 21.5})
    >>> table.apply({"trial": 0, "kind": "started", "where": "w2", "from_iteration": 5})
    >>> print(table.text())
    trial  seed  settings  status   progress  return  where
        0     1  lr=0.001  running     5/100    21.5  w2 — resumed from iteration 5 (w1 lost)
        1     2  lr=0.001  queued      0/100       —
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.sweep.grid import Trial

__all__ = ["SweepTable", "TrialRow", "FINAL_STATUSES"]

#: statuses a trial ends in
FINAL_STATUSES = ("solved", "finished", "stopped early", "stopped", "failed")


@dataclass
class TrialRow:
    trial: Trial
    status: str = "queued"
    #: iterations done (the newest reported iteration + 1)
    done: int = 0
    mean_return: float | None = None
    worker: str = ""
    #: what happened to it beside training: resumed elsewhere, why it stopped
    notes: list[str] = field(default_factory=list)
    #: (iteration, mean return) as reported: what the stopping rule reads
    curve: list[tuple[int, float]] = field(default_factory=list)
    #: iterations it went on from after a lost worker (one per resume; 0 = started over)
    resumed_from: list[int] = field(default_factory=list)
    result: dict[str, Any] | None = None


class SweepTable:
    """Every trial's row, in trial order."""

    def __init__(self, trials: Sequence[Trial], iterations: int) -> None:
        self.iterations = iterations
        self.rows = [TrialRow(t) for t in trials]

    def apply(self, event: dict[str, Any]) -> None:
        """One trial event: ``started`` (``where``: the worker's name, ``from_iteration``), ``progress``
        (``iteration``, ``return``), ``ended`` (``result``), ``stopping`` (``why``)."""
        row = self.rows[event["trial"]]
        kind = event["kind"]
        if row.status in FINAL_STATUSES:
            return  # a late report of an attempt that a lost worker left behind
        if kind == "started":
            if row.status != "queued":  # a second start: the first attempt's worker was lost
                at = int(event.get("from_iteration", 0))
                row.resumed_from.append(at)
                lost = f" ({row.worker} lost)" if row.worker else ""
                row.notes.append(
                    f"resumed from iteration {at}{lost}" if at else f"started over{lost}: no checkpoint yet"
                )
                row.done = at
                row.curve = [p for p in row.curve if p[0] < at]  # those iterations run again
            row.status, row.worker = "running", str(event.get("where", ""))
        elif kind == "progress":
            row.status = "running" if row.status == "queued" else row.status
            row.done = max(row.done, int(event["iteration"]) + 1)
            if event.get("return") is not None:
                row.mean_return = float(event["return"])
                row.curve.append((int(event["iteration"]), row.mean_return))
        elif kind == "stopping":
            row.notes.append(str(event["why"]))
        elif kind == "ended":
            result = row.result = event["result"]
            row.status = result["status"]
            row.done = max(row.done, int(result.get("iterations", row.done)))
            if result.get("mean_return") is not None:
                row.mean_return = float(result["mean_return"])
            if result.get("error"):
                row.notes.append(str(result["error"]).splitlines()[0][:160])

    # -- what the runner asks ------------------------------------------------------------
    def running(self) -> list[TrialRow]:
        return [r for r in self.rows if r.status == "running"]

    def finished(self) -> list[TrialRow]:
        return [r for r in self.rows if r.status in FINAL_STATUSES]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    # -- drawing -------------------------------------------------------------------------
    def cells(self) -> tuple[list[str], list[list[str]]]:
        """The header and each row's cells, as text."""
        header = ["trial", "seed", "settings", "status", "progress", "return", "where"]
        body = []
        for r in self.rows:
            where = " — ".join(filter(None, [r.worker, *r.notes]))
            ret = "—" if r.mean_return is None else f"{r.mean_return:.1f}"
            body.append(
                [
                    str(r.trial.index),
                    str(r.trial.seed),
                    r.trial.label(),
                    r.status,
                    f"{r.done}/{self.iterations}",
                    ret,
                    where,
                ]
            )
        return header, body

    def text(self) -> str:
        header, body = self.cells()
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
        right = {0, 1, 4, 5}

        def line(cells: list[str]) -> str:
            out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
            out[-1] = cells[-1]
            return "  ".join(out).rstrip()

        return "\n".join(line(cells) for cells in [header, *body])

    def html(self) -> str:
        header, body = self.cells()
        colour = {
            "solved": "#2e7d32",
            "finished": "#2e7d32",
            "failed": "#c62828",
            "stopped early": "#8d6e63",
            "running": "#1565c0",
        }
        th = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(h)}</th>" for h in header)
        rows = []
        for r, cells in zip(self.rows, body):
            tds = "".join(f"<td style='padding:2px 8px'>{html.escape(c)}</td>" for c in cells)
            rows.append(f"<tr style='color:{colour.get(r.status, '#555')}'>{tds}</tr>")
        summary = ", ".join(f"{n} {status}" for status, n in self.counts().items())
        return (
            f"<div><b>sweep</b>: {html.escape(summary)}<table style='font-family:monospace;font-size:12px'>"
            f"<tr>{th}</tr>{''.join(rows)}</table></div>"
        )
