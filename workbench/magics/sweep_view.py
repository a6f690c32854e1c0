"""The sweep's live table in a notebook: an ipywidgets ``HTML`` in the cell, redrawn as trials
report (``%load_ext workbench`` sets it as :data:`workbench.sweep.views.notebook_view`)."""

from __future__ import annotations

import time

from workbench.sweep.table import SweepTable


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
