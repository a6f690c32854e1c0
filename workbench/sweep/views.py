"""The sweep's live table: text here; in a notebook, the view ``%load_ext workbench`` sets.

A view has ``update(table)`` (called as trials report; it redraws at most every
``every_s``) and ``close(table)`` (the final table). The notebook's view (an ipywidgets
``HTML`` shown in the cell) lives in :mod:`workbench.magics`, the only IPython import: it
sets :data:`notebook_view` when the extension loads in a kernel.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from workbench.sweep.table import SweepTable

__all__ = ["make_view", "TextView", "notebook_view"]


#: makes the notebook's view of a table; set by ``%load_ext workbench`` in a Jupyter kernel
notebook_view: Callable[[SweepTable], Any] | None = None


def make_view(progress: Any, table: SweepTable):
    if progress is False or progress is None:
        return _NoView()
    if callable(progress):
        return progress(table)
    if notebook_view is not None:
        try:
            return notebook_view(table)
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
