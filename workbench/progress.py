"""Progress of a run as it trains: a text bar, or any view with ``advance``/``finish``.

Example:
    >>> make_progress(False, 10, "inline") is None
    True
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.runtime.run import Run

__all__ = ["make_progress", "TextProgress"]


def make_progress(progress, total: int, label: str):
    """``progress``: False (none), True (a text bar), or a factory ``(total, label) ->``
    object with ``advance(run)`` and ``finish(run)`` (``%fdg run`` passes the live view)."""
    if not progress:
        return None
    if callable(progress):
        return progress(total, label)
    return TextProgress(total, label)


class TextProgress:
    """tqdm's bar (a widget in notebooks, text elsewhere) with throughput and return."""

    def __init__(self, total: int, label: str) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=f"training ({label})", unit="it", leave=True)

    def advance(self, run: "Run") -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(_postfix(run), refresh=False)

    def finish(self, run: "Run") -> None:
        self.bar.close()


def _postfix(run: "Run") -> str:
    mean = run.mean_return()
    ret = f"{mean:.0f}" if mean is not None else "–"
    return f"{run.steps_per_second:,.0f} env-steps/s · return {ret}"
