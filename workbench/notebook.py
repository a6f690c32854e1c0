"""Read a notebook's FDG without Jupyter: its fragment cells, the ordinary cells they
need, and the options of its ``%fdg run`` line.

An ordinary cell is *needed* when it defines a name a fragment reads from the notebook,
or a name another needed cell reads (followed transitively). Cells that only plot or
inspect results are skipped. Lines that are IPython syntax (``%magic``, ``!shell``) are
dropped from ordinary cells: headless runs have no IPython.

Example:
    >>> fdg, options = load_notebook("notebooks/quickstart.ipynb")   # doctest: +SKIP
    >>> options["iterations"]                                       # doctest: +SKIP
    250
"""
from __future__ import annotations

import re
from pathlib import Path

from workbench.fdg.analysis import analyse_code
from workbench.errors import FragmentError, RunConfigError
from workbench.fdg.options import parse_run_line
from workbench.session import FDG

__all__ = ["load_notebook", "notebook_cells"]


def notebook_cells(path: str | Path) -> list[str]:
    """The code cells' sources, in order. Raises :class:`RunConfigError` for a missing or
    unreadable notebook."""
    import nbformat

    path = Path(path)
    if not path.exists():
        raise RunConfigError(f"notebook not found: {str(path)!r}. Check the path (it is relative "
                             f"to {Path.cwd()}).")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several types for bad JSON / schema
        raise RunConfigError(f"cannot read {str(path)!r} as a notebook: {exc}") from None
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def load_notebook(path: str | Path) -> tuple[FDG, dict]:
    """Build the notebook's FDG (with its namespace filled by the needed ordinary cells)
    and return it with the options of the notebook's last ``%fdg run`` line."""
    fdg = FDG()
    ordinary: list[str] = []
    run_line = ""
    for number, source in enumerate(notebook_cells(path), start=1):
        stripped = source.lstrip()
        if stripped.startswith("%%fragment"):
            first, _, body = stripped.partition("\n")
            try:
                fdg.add_cell(first, body)
            except FragmentError as exc:
                raise FragmentError(f"{path}, code cell {number}: {exc}", fragment=exc.fragment,
                                    line=exc.line) from None
            continue
        for line in source.splitlines():
            match = _RUN_LINE.match(line)
            if match:
                run_line = match.group(1)
        ordinary.append(_python_only(source))
    namespace: dict = {"__name__": "__main__"}
    for source in _needed(ordinary, set(fdg.notebook_names())):
        exec(compile(source, f"<{Path(path).name}>", "exec"), namespace)
    fdg.namespace = namespace
    return fdg, parse_run_line(_expand(run_line, namespace)) if run_line else {}


# `%fdg run …` alone or assigned (`run = %fdg run …`)
_RUN_LINE = re.compile(r"^\s*(?:\w+\s*=\s*)?%fdg\s+(run\b.*)$")
_MAGIC_LINE = re.compile(r"^\s*(?:\w+\s*=\s*)?[%!]")


def _expand(line: str, namespace: dict) -> str:
    """IPython's ``{expression}`` expansion in magic lines, evaluated in the notebook's namespace."""
    return re.sub(r"\{([^{}]+)\}", lambda m: str(eval(m.group(1), namespace)), line)


def _python_only(source: str) -> str:
    return "\n".join("" if _MAGIC_LINE.match(line) else line for line in source.splitlines())


def _needed(cells: list[str], wanted: set[str]) -> list[str]:
    """The cells that define ``wanted`` names, with the cells those depend on, in order."""
    analyses = []
    for source in cells:
        try:
            analyses.append(analyse_code(source))
        except FragmentError:
            analyses.append(None)  # not Python: never needed
    keep = [False] * len(cells)
    for index in range(len(cells) - 1, -1, -1):
        found = analyses[index]
        if found is not None and wanted & set(found.writes):
            keep[index] = True
            wanted |= set(found.inputs)
    return [source for source, kept in zip(cells, keep) if kept]
