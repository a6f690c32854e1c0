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
from typing import Any

__all__ = ["as_floats", "check_finite", "metric_values"]


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
        f"metric {name!r} {what}. A NaN or infinite loss usually means training diverged: "
        "lower the learning rate, clip gradients, and check the inputs for NaN or inf (e.g. "
        "a normalisation dividing by a zero standard deviation). To record such a value "
        f"anyway: wb.log({name!r}, value, allow_nan=True)."
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
