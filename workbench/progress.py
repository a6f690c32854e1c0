"""Progress of a run as it trains: a text bar, or any view with ``advance``/``finish``.

Example:
    >>> make_progress(False, 10, "inline") is None
    True
"""

from __future__ import annotations

from workbench.runtime.state.run import Run, headline_text, rate_label

__all__ = ["make_progress", "TextProgress", "progress_text"]


def make_progress(progress, total: int, label: str):
    """``progress``: False (none), True (a text bar), or a factory ``(total, label) ->``
    object with ``advance(run)`` and ``finish(run)`` (``%fdg run`` passes the live view)."""
    if not progress:
        return None
    if callable(progress):
        return progress(total, label)
    return TextProgress(total, label)


class TextProgress:
    """tqdm's bar (a widget in notebooks, text elsewhere) with :func:`progress_text`."""

    def __init__(self, total: int, label: str) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=f"training ({label})", unit="it", leave=True)

    def advance(self, run: Run) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(progress_text(run), refresh=False)

    def finish(self, run: Run) -> None:
        self.bar.close()


def progress_text(run: Run) -> str:
    """What the bar (and the notebook's live view) says after an iteration: env-steps/s (the
    run's ``unit`` a second), the mean return, and the newest value of each metric logged
    with ``prog_bar=True``; a run that finishes no episodes but shows metrics (GRPO) leaves
    the return out.

    >>> from workbench.runtime.engine.driver import IterationRecord
    >>> from workbench.runtime.state.run import Run
    >>> run = Run(policy_name="inline", iterations=2, steps=1)
    >>> run.record(IterationRecord(0, metrics={"charts/reward_mean": [0.75]}, shown=["charts/reward_mean"]))
    >>> progress_text(run).split(" · ", 1)[1]
    'reward_mean 0.75'
    """
    mean, headline = run.mean_return(), headline_text(run.headline())
    parts = [f"{run.steps_per_second:,.0f} {rate_label(run.unit)}"]
    if mean is not None or not headline:
        parts.append(f"return {mean:.0f}" if mean is not None else "return –")
    return " · ".join(parts + ([headline] if headline else []))
