"""Early stopping of trials behind the median (Golovin et al., "Google Vizier", KDD 2017). Pure.

A trial is stopped at iteration ``t`` when its best return so far is below the median of
the other trials' *running averages* up to ``t`` (each the mean of what it reported at
iterations ≤ ``t``), once it has run ``grace`` iterations and at least ``min_trials`` other
trials have reached ``t``. Trials that finished count with what they reported.

    >>> rule = MedianStopping(grace=2, min_trials=2)
    >>> good = [(0, 10.0), (1, 20.0), (2, 30.0)]
    >>> rule.should_stop([(0, 1.0), (1, 2.0), (2, 3.0)], [good, good])
    True
    >>> rule.should_stop([(0, 9.0), (1, 25.0), (2, 31.0)], [good, good])
    False
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.errors import RunConfigError

__all__ = ["MedianStopping", "Curve"]

#: (iteration, the trial's mean return then), in iteration order
Curve = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class MedianStopping:
    """The median-stopping rule; ``grace``: iterations every trial runs before it may be
    stopped; ``min_trials``: other trials that must have reached the same iteration."""

    grace: int = 10
    min_trials: int = 3

    def __post_init__(self) -> None:
        for name in ("grace", "min_trials"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RunConfigError(f"MedianStopping({name}=…) must be a whole number ≥ 1, got {value!r}.")

    def should_stop(self, curve: Curve, others: Sequence[Curve]) -> bool:
        """Whether the trial whose reports are ``curve`` is behind the median of ``others``."""
        if not curve or curve[-1][0] + 1 < self.grace:
            return False
        now = curve[-1][0]
        averages = [running_average(other, now) for other in others if other and other[0][0] <= now <= other[-1][0]]
        if len(averages) < self.min_trials:
            return False
        return max(value for _, value in curve) < statistics.median(averages)


def running_average(curve: Curve, until: int) -> float:
    """The mean of what ``curve`` reported at iterations ≤ ``until``.

    >>> running_average([(0, 1.0), (5, 3.0), (9, 8.0)], 5)
    2.0
    """
    values = [value for iteration, value in curve if iteration <= until]
    return sum(values) / len(values)
