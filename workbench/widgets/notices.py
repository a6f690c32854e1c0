"""How workbench's notices wrap in a notebook: at word boundaries, a token longer than the
line (a path, a URL) broken to fit.

JupyterLab breaks the text of stdout anywhere (``word-break: break-all`` on its ``pre``),
so a printed notice ("workbench: re-placing the run under …") split words mid-way at
every line end. ``%load_ext workbench`` puts :data:`STDOUT_CSS` in the page; the widgets'
own notices use :data:`NOTICE_STYLE` (the placement board's stylesheet says the same).

Example:
    >>> "overflow-wrap:anywhere" in NOTICE_STYLE
    True
"""

from __future__ import annotations

__all__ = ["NOTICE_STYLE", "STDOUT_CSS", "stdout_style_html"]

#: inline style of a notice in a widget (the live view's list of what happened to the run)
NOTICE_STYLE = "font-family:monospace;font-size:12px;word-break:normal;overflow-wrap:anywhere"

#: printed output (stdout only: tracebacks keep JupyterLab's look) wraps at word boundaries
STDOUT_CSS = (
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"] pre '
    "{word-break: normal; overflow-wrap: anywhere;}"
)


def stdout_style_html() -> str:
    """The ``<style>`` element that puts :data:`STDOUT_CSS` in a notebook page."""
    return f"<style class='workbench-notices'>{STDOUT_CSS}</style>"
