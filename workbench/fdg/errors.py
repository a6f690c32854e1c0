"""The FDG's own exceptions: bad cells, bad graphs, policies that do not fit.

Each says what was wrong, where, and what to do. Errors of running, clusters and
checkpoints live in :mod:`workbench.errors`, which re-exports these: import from there.
"""

from __future__ import annotations

__all__ = [
    "WorkbenchError",
    "FragmentError",
    "FragmentSyntaxError",
    "FragmentOptionError",
    "FDGError",
    "UndefinedNameError",
    "ConflictingWritersError",
    "StepCycleError",
    "PlacementError",
]


class WorkbenchError(Exception):
    """Base of every error workbench raises on purpose."""


class FragmentError(WorkbenchError):
    """Something is wrong with one fragment cell.

    ``fragment`` names it; ``line`` is the 1-based line in the cell, when known.
    """

    def __init__(self, message: str, *, fragment: str | None = None, line: int | None = None):
        super().__init__(message)
        self.fragment = fragment
        self.line = line


class FragmentSyntaxError(FragmentError):
    """A fragment cell does not parse."""

    def __init__(self, fragment: str, line: int | None, msg: str, text: str | None = None):
        where = f"line {line}" if line else "an unknown line"
        shown = f": {text.strip()}" if text and text.strip() else ""
        super().__init__(
            f"fragment {fragment!r}: syntax error at cell {where}{shown} ({msg}). "
            "Fix the cell and run it again; the FDG is unchanged.",
            fragment=fragment,
            line=line,
        )


class FragmentOptionError(FragmentError):
    """A fragment option is unknown or has a bad value."""


class FDGError(WorkbenchError):
    """The graph as a whole is not runnable."""


class UndefinedNameError(FDGError):
    """A fragment reads a name that no fragment writes and the notebook does not define."""

    def __init__(self, fragment: str, rate: str, name: str, line: int | None, suggestion: str = ""):
        where = f" (cell line {line})" if line else ""
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(
            f"fragment {fragment!r} ({rate} cell) reads {name!r}{where}, but no fragment writes it "
            f"and the notebook does not define it.{hint} Define it in an ordinary cell, write it "
            "in a fragment, or declare it with --reads/--writes if the analysis cannot see it."
        )
        self.fragment, self.rate, self.name, self.line = fragment, rate, name, line


class ConflictingWritersError(FDGError):
    """Two fragments write a name that a third reads: the edge would be ambiguous."""

    def __init__(self, name: str, writers: list[str], readers: list[str]):
        super().__init__(
            f"{name!r} is written by fragments {', '.join(map(repr, writers))} and read by "
            f"{', '.join(map(repr, readers))}: an interface has exactly one writer. "
            "Rename the name in all but one of the writing cells."
        )
        self.name, self.writers, self.readers = name, writers, readers


class StepCycleError(FDGError):
    """Cells of one rate depend on each other in a ring that no earlier value can start."""

    def __init__(self, cycle: list[tuple[str, str, str]], rate: str = "step"):
        ring = cycle[0][0] + "".join(f" --{name}--> {dst}" for _, name, dst in cycle)
        names = sorted({name for _, name, _ in cycle})
        if rate == "init":
            advice = "Init cells run once, in dependency order: break the ring by moving one read to a step or iteration cell."
        else:
            advice = (
                f"Give one of {', '.join(map(repr, names))} a first value in its writer's "
                "--init cell (as env's init cell writes the first obs), so the loop can carry it."
            )
        super().__init__(
            f"{rate} cells form a cycle that no loop carries: {ring}. Each needs a value "
            f"another has not produced yet. {advice}"
        )
        self.cycle, self.rate = cycle, rate


class PlacementError(WorkbenchError):
    """A distribution policy does not fit the FDG or the cluster."""
