"""Splitting a batch among replicas: the scatter, the mirror of the gather.

One replica's per-step value for several replicas of another group (the actor's actions
for the env replicas under SingleLearnerFine) is split along axis 0, in replica order.
Where those replicas sent this replica their rows (the observations the actor acted on),
an array whose rows add up to theirs goes back to each replica as its own rows — env
replicas stepping 2 and 3 envs get 2 and 3 actions back, the mirror of the gather that
joined them. An array with no such gather to mirror (none read yet from that group, or
another number of rows) is split into near-equal pieces (``numpy.array_split``).

Example:
    >>> import numpy as np
    >>> [p.tolist() for p in split(np.arange(5), 2)]
    [[0, 1, 2], [3, 4]]
    >>> [p.tolist() for p in split(np.arange(5), 2, {"obs": (2, 3)})]
    [[0, 1], [2, 3, 4]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["split", "split_rows", "rows_of", "note_rows", "RowsAmbiguous"]


class RowsAmbiguous(ValueError):
    """An array to scatter whose rows add up to two different splits the receiving
    replicas sent (two gathered values, each replica another number of rows in each)."""


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def rows_of(value: Any) -> int | None:
    """The rows of a replica's batch: the length of the first array with a batch axis in
    it (through dicts, tuples and lists), or None when it holds none.

    >>> rows_of({"t": 1.0, "obs": np.zeros((3, 4))}), rows_of(2.0), rows_of([np.zeros(2)])
    (3, None, 2)
    """
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, tuple) or type(value) is list:
        items = value
    else:
        shape = getattr(value, "shape", None) if hasattr(value, "ndim") else None
        return int(shape[0]) if shape is not None and len(shape) > 0 else None
    for item in items:
        rows = rows_of(item)
        if rows is not None:
            return rows
    return None


def note_rows(rows_sent: dict[str, dict[str, tuple[int, ...]]], group: str, key: str, values: list) -> None:
    """Keep the rows each replica of ``group`` sent in ``values`` (one per replica, gathered
    from channel ``key``) in ``rows_sent``, when every one has a batch axis (a plain env's
    ``Unbatched`` value has none): what a scatter back to them splits by."""
    rows = tuple(rows_of(v) for v in values)
    if None not in rows:
        rows_sent.setdefault(group, {})[key] = rows


def split(value: Any, parts: int, sent: Mapping[str, tuple[int, ...]] | None = None) -> list[Any]:
    """Split a batch along axis 0 into ``parts`` pieces, in replica order (the inverse of
    :func:`~workbench.runtime.values.arrays.gather`): a scatter from one replica to many.

    ``sent``: the rows each receiving replica sent in the values this replica gathered
    from them (by channel key). An array whose rows add up to those of one of them is split
    by them; any other array into near-equal pieces. Dicts, tuples and lists are split
    item by item; a value with no batch axis (a number, a bool, None, a 0-d array) goes
    whole to each.

    >>> split(True, 2), split(None, 2), split([1.0, np.arange(4)], 2)[1][1].tolist()
    ([True, True], [None, None], [2, 3])
    """
    if isinstance(value, dict):
        pieces = {k: split(v, parts, sent) for k, v in value.items()}
        return [{k: pieces[k][i] for k in value} for i in range(parts)]
    if isinstance(value, tuple) or type(value) is list:
        items = [split(v, parts, sent) for v in value]
        return [(list if type(value) is list else tuple)(p[i] for p in items) for i in range(parts)]
    if getattr(value, "ndim", 0) == 0:
        # no batch axis (a number, a bool, None, a string, a 0-d array): every replica
        # gets all of it, the mirror of gather's rule
        return [value] * parts
    sizes = _sizes(len(value), parts, sent)
    if sizes is not None:
        return split_rows(value, list(sizes))
    if _is_torch(value):
        return list(value.tensor_split(parts))
    if _is_cupy(value):
        import cupy

        return cupy.array_split(value, parts)
    return np.array_split(value, parts)


def _sizes(rows: int, parts: int, sent: Mapping[str, tuple[int, ...]] | None) -> tuple[int, ...] | None:
    """The one split of ``rows`` the receivers sent, None when none adds up to it."""
    if not sent:
        return None
    fits: dict[tuple[int, ...], str] = {}
    for key, sizes in sent.items():
        if len(sizes) == parts and sum(sizes) == rows:
            fits.setdefault(tuple(sizes), key)
    if len(fits) > 1:
        (a, key_a), (b, key_b) = list(fits.items())[:2]
        raise RowsAmbiguous(
            f"an array of {rows} rows goes back to {parts} replicas that sent {list(a)} rows "
            f"({_name(key_a)}) and {list(b)} rows ({_name(key_b)}): which rows are whose is "
            "ambiguous. Give the values read from those replicas the same rows (one row per env)."
        )
    return next(iter(fits), None)


def _name(key: str) -> str:
    """A channel key's value, as the cell names it (``step:env.obs`` → ``'obs'``)."""
    return repr(key.rpartition(":")[2].partition(".")[2] or key)


def split_rows(value: Any, sizes: list[int]) -> list[Any]:
    """Split a batch along axis 0 into pieces of ``sizes`` rows, in order (the inverse of
    :func:`~workbench.runtime.values.arrays.gather` of pieces that long); a value with no batch
    axis goes whole to each. Dicts, tuples and lists are split item by item.

    >>> [p.tolist() for p in split_rows(np.arange(5), [1, 4])]
    [[0], [1, 2, 3, 4]]
    """
    if isinstance(value, dict):
        pieces = {k: split_rows(v, sizes) for k, v in value.items()}
        return [{k: pieces[k][i] for k in value} for i in range(len(sizes))]
    if isinstance(value, tuple) or type(value) is list:
        items = [split_rows(v, sizes) for v in value]
        return [(list if type(value) is list else tuple)(p[i] for p in items) for i in range(len(sizes))]
    if getattr(value, "ndim", 0) == 0:
        return [value] * len(sizes)
    if _is_torch(value):
        return list(value.split(list(sizes)))
    bounds = np.cumsum(sizes)[:-1].tolist()
    if _is_cupy(value):
        import cupy

        return cupy.split(value, bounds)
    return np.split(value, bounds)
