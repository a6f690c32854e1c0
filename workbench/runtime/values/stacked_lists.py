"""Stacked values whose parts were Python lists at every step, marked for the gather.

A step value that is a list (``limits = [-1.0, 1.0]``, ``{"x": [obs]}``) is stacked to a
``[T, …]`` array whose axes after ``[T]`` are the list's items, not a batch: ``[T, 2]`` for
``[-1.0, 1.0]``, ``[T, 1, n]`` for ``[np.arange(n)]``. Read from several replicas, that
array must not be joined along axis 1 as a batch is (a learner read ``[T, 4]`` with two
replicas where inline gave ``[T, 2]``): the gather takes a list item by item, as it takes
a tuple — the one value where its items have no batch axis, each item's batch joined where
they have one. So the producer replica marks such parts (:func:`lists_marked`) on their
way to a reader in another group, and :func:`~workbench.runtime.values.arrays.gather` reads the
marks; the reader gets the arrays, exactly as a reader of one replica does.

    >>> import numpy as np
    >>> from workbench.runtime.values.arrays import gather, lists_marked, stack, unwrapped
    >>> marked = lists_marked(stack([[-1.0, 1.0]] * 3), [-1.0, 1.0])  # [T, 2]
    >>> gather([marked, marked], axis=1).shape, unwrapped(marked).shape
    ((3, 2), (3, 2))
    >>> stacked = stack([[np.arange(2)]] * 3)  # [T, 1, n]: the list's one item has a batch axis
    >>> gather([lists_marked(stacked, [np.arange(2)])] * 2, axis=1).shape
    (3, 1, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Listed", "StackedLists", "lists_marked", "unmarked"]


class Listed:
    """A part of a stacked value that was a list at every step: its ``[T, …]`` array, and
    ``depth``, how many axes after ``[T]`` NumPy made of the list (and of the lists and
    tuples in it). The gather joins the items' own batch axis, ``depth`` axes further than
    a stacked array's, or, when the items have none, applies the rule for values without
    one (the one value when every replica wrote the same, else an error)."""

    __slots__ = ("value", "depth")

    def __init__(self, value: Any, depth: int) -> None:
        self.value, self.depth = value, depth

    def __reduce__(self):
        return Listed, (self.value, self.depth)


class StackedLists:
    """The envelope of a stacked value holding :class:`Listed` parts: a value holding none
    passes on untouched, and one reader of one replica gets it unmarked at once."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self):
        return StackedLists, (self.value,)


def lists_marked(stacked: Any, step: Any) -> Any:
    """``stacked`` (the stack of a step value, of which ``step`` is one step's) with its
    parts that were lists marked :class:`Listed`, in a :class:`StackedLists`; ``stacked``
    itself when it holds none (arrays, numbers, dicts and tuples of those)."""
    marked = _mark(stacked, step)
    return stacked if marked is stacked else StackedLists(marked)


def _mark(stacked: Any, step: Any) -> Any:
    if type(step) is list and isinstance(stacked, np.ndarray):
        leaf = step
        while isinstance(leaf, (list, tuple)) and len(leaf):
            leaf = leaf[0]
        inner = leaf.ndim if hasattr(leaf, "ndim") and hasattr(leaf, "shape") else np.ndim(leaf)
        return Listed(stacked, max(stacked.ndim - 1 - inner, 0))  # the items' own axes come last
    if isinstance(step, dict) and isinstance(stacked, dict):
        parts = {k: _mark(v, step[k]) for k, v in stacked.items()}
        return parts if any(parts[k] is not stacked[k] for k in stacked) else stacked
    if isinstance(step, tuple) and isinstance(stacked, tuple):
        parts = tuple(_mark(v, s) for v, s in zip(stacked, step))
        return parts if any(p is not v for p, v in zip(parts, stacked)) else stacked
    return stacked


def unmarked(value: Any) -> Any:
    """A marked value (the inside of a :class:`StackedLists`) as a reader gets it."""
    if type(value) is Listed:
        return value.value
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(unmarked(v) for v in value)
    return value
