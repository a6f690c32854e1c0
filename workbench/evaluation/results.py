"""What an evaluation measured: per-episode returns and lengths, and their summary."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

__all__ = ["iqm", "EvaluationResult"]


def iqm(values) -> float:
    """The interquartile mean: the mean of the middle 50 % of ``values`` (a quarter of them,
    rounded down, left out at each end: ``scipy.stats.trim_mean(values, 0.25)``, rliable's
    IQM). Robust to a few lucky or unlucky episodes; with under 4 values it is the mean.

    >>> iqm([1, 2, 3, 4, 5, 6, 7, 100])
    4.5
    >>> iqm([500.0] * 9 + [9.0])
    500.0
    >>> iqm([3, 1])
    2.0
    >>> iqm([])
    Traceback (most recent call last):
    ...
    ValueError: iqm needs at least one value
    """
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("iqm needs at least one value")
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut]
    return sum(middle) / len(middle)


def _std(values: tuple[float, ...]) -> float:
    """Population standard deviation (NumPy's default, as CleanRL and SB3 report)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@dataclass(frozen=True)
class EvaluationResult:
    """Episodes of a trained state played without learning (``run.evaluate()``).

    ``returns[i]``/``lengths[i]`` are episode ``i``'s; ``envs[i]`` the env (its index among
    the evaluation's envs) that played it. ``seeds`` are the env seeds used, ``cell_seeds``
    those the cells asked for (training's); ``held_out`` says the two differ by design.
    ``greedy``: a cell asked ``wb.evaluating()`` (and acted greedily); False means the cells
    acted as in training.

    >>> result = EvaluationResult(returns=(500.0, 480.0, 20.0, 500.0), lengths=(500, 480, 20, 500),
    ...                           envs=(0, 1, 2, 3), seeds=(1000001,), cell_seeds=(1,))
    >>> result.mean, result.iqm, round(result.std, 1)
    (375.0, 490.0, 205.1)
    >>> result
    EvaluationResult(4 episodes: return mean 375.0 ± 205.1, IQM 490.0, min 20.0, max 500.0; length mean 375.0; greedy; held-out env seeds 1000001 (training's: 1))
    >>> float(result.to_frame().loc[2, "return"])
    20.0
    """

    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    envs: tuple[int, ...] = ()
    seeds: tuple[int, ...] = ()
    cell_seeds: tuple[int | None, ...] = ()
    held_out: bool = True
    greedy: bool = True
    #: the training iterations the state had finished, and the env steps evaluation took
    iteration: int | None = None
    env_steps: int = 0
    seconds: float = 0.0

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return sum(self.returns) / len(self.returns)

    @property
    def std(self) -> float:
        return _std(self.returns)

    @property
    def iqm(self) -> float:
        return iqm(self.returns)

    @property
    def mean_length(self) -> float:
        return sum(self.lengths) / len(self.lengths)

    def to_frame(self):
        """One row per episode: ``return``, ``length``, ``env`` (pandas DataFrame, index ``episode``)."""
        import pandas as pd

        frame = pd.DataFrame(
            {
                "return": list(self.returns),
                "length": list(self.lengths),
                "env": list(self.envs) or [None] * self.episodes,
            }
        )
        frame.index.name = "episode"
        return frame

    def summary(self) -> str:
        seeds = ", ".join(map(str, self.seeds))
        asked = ", ".join("none" if s is None else str(s) for s in self.cell_seeds)
        where = (
            f"held-out env seeds {seeds} (training's: {asked})" if self.held_out else f"env seeds {seeds} (as asked)"
        )
        how = "greedy" if self.greedy else "sampled as in training (no cell asked wb.evaluating())"
        after = f" after iteration {self.iteration}" if self.iteration is not None else ""
        return (
            f"{self.episodes} episode{'s' if self.episodes != 1 else ''}: return mean {self.mean:.1f} "
            f"± {self.std:.1f}, IQM {self.iqm:.1f}, min {min(self.returns):.1f}, max {max(self.returns):.1f}; "
            f"length mean {self.mean_length:.1f}; {how}; {where}{after}"
        )

    def __repr__(self) -> str:
        return f"EvaluationResult({self.summary()})"

    def _repr_html_(self) -> str:
        cells = "".join(f"<td style='text-align:right'>{r:g}</td>" for r in self.returns)
        lengths = "".join(f"<td style='text-align:right'>{n}</td>" for n in self.lengths)
        return (
            f"<div style='font-family:monospace'><b>evaluation</b> — {html.escape(self.summary())}"
            f"<table><tr><th>return</th>{cells}</tr><tr><th>length</th>{lengths}</tr></table></div>"
        )
