"""What a sweep returns: every trial's row as a DataFrame, and each finished trial's Run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.sweep.table import SweepTable

__all__ = ["SweepResult"]


@dataclass
class SweepResult:
    """``table``: a pandas DataFrame, a row per trial (its seed, each setting, status,
    iterations, final mean return, when it solved, where it resumed); ``runs``: trial →
    its :class:`~workbench.runtime.state.run.Run` (without its state); ``interrupted``: the
    sweep was stopped (Ctrl-C, ``%fdg stop``) and the trials it had not finished are marked
    so; ``wall_s``: the sweep's seconds, from its first trial's submission."""

    trials: SweepTable
    wall_s: float = 0.0
    interrupted: bool = False
    runs: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for row in self.trials.rows:
            if row.result is not None and row.result.get("run") is not None:
                self.runs[row.trial.index] = row.result["run"]

    @property
    def table(self):
        import pandas as pd

        records = []
        for row in self.trials.rows:
            result = row.result or {}
            solved = result.get("solved_at") or {}
            records.append(
                {
                    "trial": row.trial.index,
                    "seed": row.trial.seed,
                    **row.trial.settings,
                    "status": row.status if row.status != "queued" else "not run",
                    "iterations": row.done,
                    "mean_return": row.mean_return,
                    "solved_iteration": solved.get("iteration"),
                    "env_steps_to_solve": solved.get("env_steps"),
                    "time_to_solve_s": solved.get("time_s"),
                    "env_steps": result.get("env_steps"),
                    "resumed_from": ", ".join(map(str, row.resumed_from)) or None,
                    "worker": row.worker or None,
                    "error": result.get("error"),
                }
            )
        return pd.DataFrame.from_records(records).set_index("trial")

    def plot(self, by: str | None = None, metric: str | None = None, **options):
        """The trials' curves grouped by the setting ``by`` (default: the first swept one; a
        sweep of seeds alone: the policy, so every seed is in one group): each group's IQM
        across its seeds with a stratified-bootstrap confidence interval
        (:func:`workbench.run_store.compare`; ``options`` go to it)."""
        from workbench.run_store import compare

        if by is None:
            swept = [k for k in (self.trials.rows[0].trial.settings if self.trials.rows else {})]
            by = swept[0] if swept else "policy"
        runs = [self.runs[i] for i in sorted(self.runs)]
        return compare(runs, by=by, **({"metric": metric} if metric else {}), **options)

    def summary(self) -> str:
        counts = self.trials.counts()
        said = ", ".join(f"{n} {'not run' if status == 'queued' else status}" for status, n in counts.items())
        resumed = sum(bool(r.resumed_from) for r in self.trials.rows)
        extra = f"; {resumed} resumed after a lost worker" if resumed else ""
        stopped = " (interrupted: finished trials kept)" if self.interrupted else ""
        return f"sweep of {len(self.trials.rows)} trials in {self.wall_s:.1f} s{stopped}: {said}{extra}"

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return self.trials.html()
