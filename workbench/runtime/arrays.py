"""Stacking and gathering values that flow along interfaces.

Values are NumPy arrays, torch tensors, CuPy arrays, Python numbers, or tuples/lists/dicts
of those. Stacking adds a leading ``[T]`` axis; gathering concatenates replicas along the
batch axis; values that are not arrays gather into a list.

Example:
    >>> import numpy as np
    >>> stack([np.zeros(3), np.ones(3)]).shape
    (2, 3)
    >>> gather([np.zeros((2, 3)), np.ones((2, 5))], axis=1).shape
    (2, 8)
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["stack", "gather", "split", "nbytes"]


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def stack(values: list[Any]) -> Any:
    """Stack per-step values into one value with a leading time axis."""
    first = values[0]
    if isinstance(first, dict):
        return {k: stack([v[k] for v in values]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack(list(parts)) for parts in zip(*values))
    if _is_torch(first):
        import torch

        return torch.stack(values)
    if _is_cupy(first):
        import cupy

        return cupy.stack(values)
    return np.stack([np.asarray(v) for v in values])


def gather(values: list[Any], axis: int = 0) -> Any:
    """Concatenate one value per replica along ``axis`` (the batch axis)."""
    if len(values) == 1:
        return values[0]
    first = values[0]
    if isinstance(first, dict):
        return {k: gather([v[k] for v in values], axis) for k in first}
    if isinstance(first, tuple):
        return tuple(gather(list(parts), axis) for parts in zip(*values))
    if _is_torch(first):
        import torch

        return torch.cat(values, dim=axis) if first.dim() > axis else torch.stack(values)
    if _is_cupy(first):
        import cupy

        return cupy.concatenate(values, axis=axis)
    if isinstance(first, np.ndarray) and first.ndim > axis:
        return np.concatenate(values, axis=axis)
    return list(values)


def split(value: Any, parts: int) -> list[Any]:
    """Split a batch along axis 0 into ``parts`` near-equal pieces, in replica order (the
    inverse of :func:`gather`): a scatter from one replica to many.

    >>> [p.tolist() for p in split(np.arange(5), 2)]
    [[0, 1, 2], [3, 4]]
    """
    if isinstance(value, dict):
        pieces = {k: split(v, parts) for k, v in value.items()}
        return [{k: pieces[k][i] for k in value} for i in range(parts)]
    if isinstance(value, tuple):
        pieces = [split(v, parts) for v in value]
        return [tuple(p[i] for p in pieces) for i in range(parts)]
    if _is_torch(value):
        return list(value.tensor_split(parts))
    if _is_cupy(value):
        import cupy

        return cupy.array_split(value, parts)
    return np.array_split(np.asarray(value), parts)


def nbytes(value: Any) -> int:
    """Approximate payload size of a value, for the plan's traffic figures."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    if _is_torch(value):
        return value.element_size() * value.nelement() if hasattr(value, "nelement") else 0
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    return 8
