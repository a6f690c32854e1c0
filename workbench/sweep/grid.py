"""The trials of a sweep: every combination of the settings, for every seed. Pure.

    >>> [(t.index, t.seed, t.settings) for t in trial_grid({"cfg.lr": [1e-3, 3e-3]}, seeds=2)]
    [(0, 1, {'cfg.lr': 0.001}), (1, 1, {'cfg.lr': 0.003}), (2, 2, {'cfg.lr': 0.001}), (3, 2, {'cfg.lr': 0.003})]

Seed-major: every setting's first seed comes before any second seed, so settings run side
by side (what the median-stopping rule compares) from the start.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import RunConfigError

__all__ = ["Trial", "trial_grid", "seed_list"]


@dataclass(frozen=True)
class Trial:
    """One run of the sweep: its number, its seed and the settings it changes."""

    index: int
    seed: int
    settings: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """``lr=0.003`` — the settings by field name, without the object's name."""
        return ", ".join(f"{k.rpartition('.')[2]}={v!r}" for k, v in self.settings.items()) or "—"


def seed_list(seeds: int | Iterable[int]) -> list[int]:
    """``10`` → seeds 1..10; a list of seeds is kept as given (each a whole number ≥ 0, no repeats)."""
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds <= 0:
            raise RunConfigError(f"seeds must be a number of seeds ≥ 1 (seeds 1..N) or a list of seeds, got {seeds}.")
        return list(range(1, int(seeds) + 1))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise RunConfigError(f"seeds must be a number of seeds ≥ 1 or a list of seeds, got {seeds!r}.")
    out = list(seeds)
    if not out:
        raise RunConfigError("seeds is an empty list: give at least one seed (or a number N for seeds 1..N).")
    bad = [s for s in out if not isinstance(s, numbers.Integral) or isinstance(s, bool) or s < 0]
    if bad:
        raise RunConfigError(f"seeds must be whole numbers ≥ 0, got {bad[0]!r}.")
    if len(set(out)) != len(out):
        raise RunConfigError(f"seeds {out} repeat a seed: each trial of a setting needs its own.")
    return [int(s) for s in out]


def trial_grid(over: Mapping[str, Iterable[Any]], seeds: int | Iterable[int]) -> list[Trial]:
    """Every combination of ``over``'s values (the first key slowest) for each seed."""
    if not isinstance(over, Mapping):
        raise RunConfigError(
            f"over must be a dict of setting → list of values, e.g. "
            f"{{'cfg.learning_rate': [1e-3, 3e-3]}}, not {type(over).__name__}."
        )
    values: dict[str, list] = {}
    for key, listed in over.items():
        if isinstance(listed, (str, bytes)) or not isinstance(listed, Iterable):
            raise RunConfigError(f"sweep over {key!r}: give a list of values, e.g. [{listed!r}], not {listed!r}.")
        values[key] = list(listed)
        if not values[key]:
            raise RunConfigError(f"sweep over {key!r}: the list of values is empty; give at least one.")
    combos = [dict(zip(values, combo)) for combo in itertools.product(*values.values())]
    return [
        Trial(i, seed, combo)
        for i, (seed, combo) in enumerate((seed, combo) for seed in seed_list(seeds) for combo in combos)
    ]
