"""The arithmetic of ``policy="auto"``: how long each candidate is tried, whether the run is
long enough to try them all, and how a trial's speed is read and reported. Pure functions;
the trainer runs the trials.

Example:
    >>> trial_length(iterations=16, candidates=4)
    3
    >>> check_budget(16, [("SingleLearnerCoarse", None), ("MultiLearner", None)], trial=3)
    >>> check_budget(3, [("SingleLearnerCoarse", None), ("MultiLearner", None)], trial=2)
    Traceback (most recent call last):
    ...
    workbench.errors.RunConfigError: --iterations 3 is too few for policy auto: it tries SingleLearnerCoarse, MultiLearner for 2 iterations each and keeps the fastest, so it needs at least 5. Ask for more iterations, or name a policy (coarse, fine, …).
"""

from __future__ import annotations

from workbench.errors import RunConfigError

__all__ = ["AUTO_TRIAL_ITERATIONS", "trial_length", "check_budget", "steady_rate", "auto_summary"]

#: iterations each candidate policy runs under policy="auto" (the first is not timed)
AUTO_TRIAL_ITERATIONS = 4


def trial_length(iterations: int, candidates: int) -> int:
    """Iterations per candidate: up to ``AUTO_TRIAL_ITERATIONS``, fewer in a short run, never
    fewer than 2 (the first of a trial deploys and is not timed)."""
    return max(2, min(AUTO_TRIAL_ITERATIONS, (iterations - 1) // max(1, candidates)))


def check_budget(iterations: int, candidates: list, trial: int, completed: int = 0) -> None:
    """Refuse a run too short for every candidate's trial plus one iteration for the winner:
    measuring one preset and "choosing" it would be a guess presented as a measurement."""
    needed = completed + trial * len(candidates) + 1
    if candidates and iterations < needed:
        raise RunConfigError(
            f"--iterations {iterations} is too few for policy auto: it tries "
            f"{', '.join(name for name, _ in candidates)} for {trial} iterations each and keeps "
            f"the fastest, so it needs at least {needed}. Ask for more iterations, or name a "
            "policy (coarse, fine, …)."
        )


def steady_rate(rows: list[dict]) -> float:
    """env-steps/s over a stretch of iterations, leaving out the first (deploy, warm-up).

    >>> steady_rate([{"env_steps": 0, "time_s": 1.0}, {"env_steps": 500, "time_s": 2.0}])
    500.0
    """
    if len(rows) < 2:
        return 0.0
    steps = rows[-1]["env_steps"] - rows[0]["env_steps"]
    seconds = rows[-1]["time_s"] - rows[0]["time_s"]
    return steps / seconds if seconds > 0 else 0.0


def auto_summary(table: list[dict], best: str, left_out: tuple[str, ...] = ()) -> str:
    """The lines auto prints once every candidate was tried: ``table`` is the run's
    ``auto_table``, a row per candidate of its ``policy``, ``rate`` and the rate's ``unit``
    (the run's unit a second: completions/s for GRPO); ``left_out`` says which presets were
    not tried and why (``auto_candidates(...).left_out``), so a preset missing from the
    table is never a mystery.

    >>> print(auto_summary([{"policy": "coarse", "rate": 3730.0, "unit": "completions/s"}], "coarse",
    ...                    ("MultiLearner: not tried, the learner never calls wb.allreduce",)))
    policy auto measured (completions/s, first iteration of each left out):
      coarse                        3,730   ← continuing with this
      MultiLearner: not tried, the learner never calls wb.allreduce
    """
    lines = [f"policy auto measured ({table[0]['unit']}, first iteration of each left out):"]
    lines += [
        f"  {row['policy']:<22} {row['rate']:>12,.0f}" + ("   ← continuing with this" if row["policy"] == best else "")
        for row in table
    ]
    lines += [f"  {line}" for line in left_out]
    return "\n".join(lines)
