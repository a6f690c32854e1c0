"""The ``%fdg evaluate`` / ``%fdg show`` line: ``[--episodes N] [--seed S]``.

>>> parse_evaluate_line("--episodes 5 --seed 7", default_episodes=10)
{'episodes': 5, 'seed': 7}
>>> parse_evaluate_line("", default_episodes=1)
{'episodes': 1, 'seed': None}
>>> parse_evaluate_line("--episodes five", default_episodes=1)
Traceback (most recent call last):
...
workbench.evaluation.errors.EvaluationError: --episodes needs a whole number, got 'five'. Usage: [--episodes N] [--seed S]
"""

from __future__ import annotations

from workbench.evaluation.errors import EvaluationError

__all__ = ["parse_evaluate_line", "EVALUATE_USAGE"]

EVALUATE_USAGE = "[--episodes N] [--seed S]"


def parse_evaluate_line(line: str, *, default_episodes: int) -> dict:
    """``episodes`` and ``seed`` (None: held-out seeds) from a magic's line."""
    words = line.split()
    out = {"episodes": default_episodes, "seed": None}
    while words:
        flag = words.pop(0)
        name = flag[2:] if flag.startswith("--") else None
        if name not in out:
            raise EvaluationError(f"unknown option {flag!r}. Usage: {EVALUATE_USAGE}")
        if not words:
            raise EvaluationError(f"{flag} needs a value. Usage: {EVALUATE_USAGE}")
        value = words.pop(0)
        try:
            out[name] = int(value)
        except ValueError:
            raise EvaluationError(f"{flag} needs a whole number, got {value!r}. Usage: {EVALUATE_USAGE}") from None
    return out
