"""The FDG's words as types: rates, timings, device kinds — one definition, one validator each.

Every other module names these through the aliases below (``Rate``, ``Timing``,
``DeviceKind``), so a type checker sees a typo and a reader sees the set of values.

Example:
    >>> check_device_kind("gpu", "fragment 'learner'")
    'gpu'
    >>> check_device_kind("tpu", "fragment 'learner'")
    Traceback (most recent call last):
    ...
    ValueError: fragment 'learner': device must be 'cpu' or 'gpu', not 'tpu'.
"""

from __future__ import annotations

import numbers
from typing import Literal, get_args

__all__ = [
    "whole_number",
    "Rate",
    "RATES",
    "Timing",
    "TIMINGS",
    "DeviceKind",
    "DEVICE_KINDS",
    "IN_PROCESS",
    "check_device_kind",
]

#: When a fragment's cell runs: once per replica when deployed, every step, every iteration.
Rate = Literal["init", "step", "iteration"]
#: Rates in the order they run within a replica's life: init once, then per iteration
#: the ``T`` steps followed by the iteration cell.
RATES: tuple[Rate, ...] = get_args(Rate)

#: How a value crosses an interface (from the producer's and the consumer's rates).
Timing = Literal["per-step", "stacked", "latest", "per-iteration", "once"]
#: Human words for each timing, as drawings, the board and messages show them.
TIMINGS: dict[Timing, str] = {
    "per-step": "every step",
    "stacked": "stacked [T, …] each iteration",
    "latest": "latest value, fixed per iteration",
    "per-iteration": "every iteration",
    "once": "once, at init",
}

#: What a fragment or a group asks for; placement maps it onto a worker's CPU or one of its
#: GPUs (a replica then sees a concrete torch/CuPy device string, "cpu" or "cuda:K").
DeviceKind = Literal["cpu", "gpu"]
DEVICE_KINDS: tuple[DeviceKind, ...] = get_args(DeviceKind)

#: The worker name of replicas that run in the calling process (the inline policy).
IN_PROCESS = "local"


def check_device_kind(value, where: str) -> DeviceKind:
    """``value`` if it is a device kind, else a ValueError saying ``where`` it was given
    (callers raise their own domain error type from it)."""
    if value not in DEVICE_KINDS:
        raise ValueError(f"{where}: device must be 'cpu' or 'gpu', not {value!r}.")
    return value


def whole_number(value) -> int | None:
    """``value`` as a plain int when it is a whole number of any integer type (a NumPy
    integer from a computed budget too), None for anything else — a bool, 2.0, "2".

    >>> import numpy as np
    >>> whole_number(np.int64(4)), whole_number(True), whole_number(2.0)
    (4, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)
