"""Metrics logged from device values, read once at the end of the iteration.

``wb.log(name, x)`` with a CuPy array, a CUDA tensor or an env's ``EndedEpisodes`` does not
read ``x`` then: reading a device value makes the host wait for the GPU, and a step cell
that logs every step would put that wait in every step. The value is kept (with the cell
line that logged it) and read when the replica's task ends — consecutive values of one
metric in one copy — so the rollout never waits on the host. The metric's values and
their order are what an immediate read would give; a NaN or infinite value is still an
error naming the fragment and the cell line that logged it.

``wb.log`` (`workbench.context`) keeps the values and the runtime reads them: this module is
below both (workbench/layers.py).

Example:
    >>> import numpy as np
    >>> pending = [Deferred(np.array([1.0, 2.0]), False, None), Deferred(np.array([3.0]), False, None)]
    >>> read_metric("charts/x", [0.5, *pending])
    [0.5, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from workbench.metric_values import as_floats, check_finite

__all__ = ["Deferred", "DeferredMetricError", "is_deferred", "read_metric", "where_logged"]


def is_deferred(value: Any) -> bool:
    """A value better read at the end of the iteration than now: one marked
    ``deferred_metric`` (an env's ``EndedEpisodes``), a CuPy array or a CUDA tensor.

    >>> import numpy as np
    >>> is_deferred(np.zeros(3)), is_deferred(2.0)
    (False, False)
    """
    if getattr(value, "deferred_metric", False):
        return True
    kind = type(value).__module__
    if kind.startswith("cupy"):
        return hasattr(value, "shape")
    if kind.startswith("torch"):
        return getattr(getattr(value, "device", None), "type", "cpu") == "cuda"
    return False


@dataclass
class Deferred:
    """One logged device value, not read yet; ``where`` is (fragment, rate, line)."""

    value: Any
    allow_nan: bool
    where: tuple[str, str, int] | None


class DeferredMetricError(ValueError):
    """A deferred metric that held NaN or inf (or was not numbers), with where it was
    logged: the runtime makes it the logging fragment's error."""

    def __init__(self, message: str, where: tuple[str, str, int] | None) -> None:
        super().__init__(message)
        self.where = where

    def as_fragment_error(self, group: str, replica: int, worker: str, iteration):
        """The `FragmentRuntimeError` a user sees: the fragment and cell line that logged
        the value (the group's name where no cell was on the stack)."""
        import linecache

        from workbench.errors import FragmentRuntimeError

        frag, rate, line = self.where or (group, "step", None)
        return FragmentRuntimeError(
            fragment=frag,
            rate=rate,
            replica=replica,
            worker=worker,
            line=line,
            source_line=linecache.getline(f"<fragment {frag}:{rate}>", line) if line else None,
            error=f"MetricError: {self}",
            iteration=iteration,
            traceback_text="(a device value logged with wb.log is read at the end of the iteration, "
            "so the cell had moved on when it was found)\n",
        )


def where_logged() -> tuple[str, str, int] | None:
    """(fragment, rate, line) of the innermost fragment cell on the calling stack."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<fragment ") and ":" in name:
            frag, rate = name[len("<fragment ") : -1].rsplit(":", 1)
            return frag, rate, frame.f_lineno
        frame = frame.f_back
    return None


def read_metric(name: str, values: list) -> list[float]:
    """``values`` with each run of consecutive `Deferred` items read (one copy per run of
    one kind) and checked; plain floats pass through in place."""
    out: list[float] = []
    run: list[Deferred] = []
    for item in [*values, None]:
        if isinstance(item, Deferred) and (not run or _kind(run[0]) == _kind(item)):
            run.append(item)
            continue
        if run:
            out.extend(_read(name, run))
            run = []
        if isinstance(item, Deferred):
            run.append(item)
        elif item is not None:
            out.append(item)
    return out


def _kind(item: Deferred) -> tuple:
    value = item.value
    return (type(value).__name__, type(getattr(value, "values", value)).__module__.split(".")[0], item.allow_nan)


def _read(name: str, run: list[Deferred]) -> list[float]:
    try:
        numbers = as_floats(_joined([d.value for d in run]))
    except (TypeError, ValueError) as exc:
        raise DeferredMetricError(f"wb.log({name!r}, …) got a value that is not numbers: {exc}", run[0].where) from None
    if not run[0].allow_nan and not all(map(math.isfinite, numbers)):
        try:
            check_finite(name, numbers)
        except Exception as exc:  # noqa: BLE001  (its text, with where it was logged)
            bad = next(d for d in run if not all(map(math.isfinite, as_floats(d.value))))
            raise DeferredMetricError(str(exc), bad.where) from None
    return numbers


def _joined(values: list) -> Any:
    """One value holding all of ``values`` in order (so one device→host copy reads them)."""
    first = values[0]
    if len(values) == 1:
        return first
    if hasattr(type(first), "concatenate") and getattr(first, "deferred_metric", False):
        return type(first).concatenate(values)
    if type(first).__module__.startswith("torch"):
        import torch

        return torch.cat([v.reshape(-1) for v in values])
    if type(first).__module__.startswith("cupy"):
        import cupy

        return cupy.concatenate([v.reshape(-1) for v in values])
    return values
