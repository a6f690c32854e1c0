"""Metric values as the runtime keeps them: a list of finite floats per metric and iteration.

``wb.log`` accepts a number or an array of numbers (NumPy, torch, CuPy, nested lists);
these helpers turn them into floats and refuse NaN/inf with a message that says what to do.
No imports beyond the standard library: both the fragment-facing API (`workbench.context`)
and the runtime's deferred reads use them.

    >>> as_floats([1, [2.5, 3]])
    [1.0, 2.5, 3.0]
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["as_floats", "check_finite", "metric_values", "advice_for"]


def metric_values(name: str, value: Any) -> list[float]:
    try:
        return as_floats(value)
    except (TypeError, ValueError):
        from workbench.errors import MetricError

        raise MetricError(
            f"wb.log({name!r}, …) needs a number or an array of numbers, got "
            f"{type(value).__name__} {_short(value)}. Log each number under its own name "
            "(e.g. for name, number in losses.items(): wb.log(name, number))."
        ) from None


def check_finite(name: str, values: list[float]) -> None:
    bad = [v for v in values if not math.isfinite(v)]
    if not bad:
        return
    from workbench.errors import MetricError

    kinds = ", ".join(sorted({str(v) for v in bad}))
    what = f"is {kinds}" if len(values) == 1 else f"has {len(bad)} of {len(values)} values not finite ({kinds})"
    raise MetricError(
        f"metric {name!r} {what}. {advice_for(name)} To record such a value "
        f"anyway: wb.log({name!r}, value, allow_nan=True)."
    )


#: words in a metric's name that make it a training quantity (NaN: training diverged) …
_TRAINING_WORDS = ("loss", "grad", "kl", "entropy", "td", "value", "q", "qf", "norm", "lr")
#: … or a quantity the environment or the reward produced (NaN: look at the env)
_ENV_WORDS = ("return", "returns", "reward", "rewards", "episodic", "episode", "length", "score")


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def advice_for(name: str) -> str:
    """What a NaN or inf in metric ``name`` most likely means, and where to look.

    >>> advice_for("losses/loss").startswith("A NaN or infinite loss usually means training diverged")
    True
    >>> advice_for("charts/episodic_return").startswith("A NaN or infinite return")
    True
    >>> advice_for("charts/SPS").startswith("Check the computation")
    True
    """
    words = _words(name)
    if any("loss" in w for w in words) or words & set(_TRAINING_WORDS):
        return (
            "A NaN or infinite loss usually means training diverged: lower the learning rate, "
            "clip gradients, and check the inputs for NaN or inf (e.g. a normalisation dividing "
            "by a zero standard deviation)."
        )
    if any(w.startswith(("return", "reward", "episod")) for w in words) or words & set(_ENV_WORDS):
        return (
            "A NaN or infinite return or reward comes from the environment or the reward "
            "computation: check the env's step (a custom env dividing by zero or overflowing "
            "its state), any fragment that shapes or normalises the reward (a zero standard "
            "deviation), and means over no episodes (np.mean of an empty array is nan: log "
            "only when an episode finished). If the actions are NaN too, the policy diverged "
            "first: look at the losses."
        )
    return (
        "Check the computation that produced it and its inputs for NaN or inf (a division by "
        "zero, the log of zero, np.mean of an empty array)."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def as_floats(value: Any) -> list[float]:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        out: list[float] = []
        for v in value:
            out.extend(as_floats(v))
        return out
    return [float(value)]
