"""The sweep's live table: HTML in a notebook (an ipywidgets ``HTML``), text elsewhere.

A view has ``update(table)`` (called as trials report; it redraws at most every
``every_s``) and ``close(table)`` (the final table).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from workbench.sweep.table import SweepTable

__all__ = ["make_view", "TextView", "NotebookView", "in_notebook"]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (asked of what is loaded, importing nothing)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and hasattr(shell, "kernel")


def make_view(progress: Any, table: SweepTable):
    if progress is False or progress is None:
        return _NoView()
    if callable(progress):
        return progress(table)
    if in_notebook():
        try:
            return NotebookView(table)
        except ImportError:  # no ipywidgets: the text table still works
            pass
    return TextView(table)


class _NoView:
    def update(self, table: SweepTable) -> None:
        pass

    def close(self, table: SweepTable) -> None:
        pass


class TextView:
    """On a terminal, the table redrawn in place; elsewhere (a log), a line per trial that
    starts, resumes or ends, and the whole table at the end."""

    def __init__(self, table: SweepTable, stream=None, every_s: float = 0.5) -> None:
        self.stream = stream or sys.stdout
        self.every_s = every_s
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.drawn_lines = 0
        self.last = 0.0
        self.said: dict[int, tuple] = {}

    def update(self, table: SweepTable) -> None:
        if self.tty:
            now = time.monotonic()
            if now - self.last >= self.every_s:
                self.last = now
                self._redraw(table)
            return
        for row in table.rows:
            state = (row.status, row.worker, len(row.resumed_from))
            if row.status != "queued" and self.said.get(row.trial.index) != state:
                self.said[row.trial.index] = state
                where = " — ".join(filter(None, [row.worker, *row.notes]))
                ret = "" if row.mean_return is None else f", return {row.mean_return:.1f}"
                print(
                    f"trial {row.trial.index} (seed {row.trial.seed}, {row.trial.label()}): {row.status} "
                    f"at {row.done}/{table.iterations}{ret} [{where}]",
                    file=self.stream,
                    flush=True,
                )

    def _redraw(self, table: SweepTable) -> None:
        text = table.text()
        up = f"\x1b[{self.drawn_lines}F\x1b[J" if self.drawn_lines else ""
        self.stream.write(up + text + "\n")
        self.stream.flush()
        self.drawn_lines = text.count("\n") + 1

    def close(self, table: SweepTable) -> None:
        if self.tty:
            self._redraw(table)
        else:
            self.update(table)
            print(table.text(), file=self.stream, flush=True)


class NotebookView:
    """An ipywidgets ``HTML`` shown in the cell, its value redrawn as trials report."""

    def __init__(self, table: SweepTable, every_s: float = 0.3) -> None:
        import ipywidgets
        from IPython.display import display

        self.every_s = every_s
        self.last = 0.0
        self.widget = ipywidgets.HTML(table.html())
        display(self.widget)

    def update(self, table: SweepTable) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.widget.value = table.html()

    def close(self, table: SweepTable) -> None:
        self.widget.value = table.html()
