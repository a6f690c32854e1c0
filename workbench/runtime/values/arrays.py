"""Stacking and gathering values that flow along interfaces.

Values are NumPy arrays, torch tensors, CuPy arrays, Python numbers, or tuples/lists/dicts
of those. Stacking adds a leading ``[T]`` axis; gathering concatenates replicas along the
batch axis, and passes on a value without one only when every replica wrote the same.

Example:
    >>> import numpy as np
    >>> stack([np.zeros(3), np.ones(3)]).shape
    (2, 3)
    >>> gather([np.zeros((2, 3)), np.ones((2, 5))], axis=1).shape
    (2, 8)
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np

from workbench.runtime.values.scatter import split, split_rows
from workbench.runtime.values.stacked_lists import Listed, StackedLists, lists_marked, unmarked

__all__ = [
    "stack",
    "gather",
    "split",
    "split_rows",
    "nbytes",
    "handed_over",
    "StepMismatch",
    "ReplicasDisagree",
    "ReplicasMisfit",
    "Unbatched",
    "unwrapped",
    "lists_marked",
]

#: ``WORKBENCH_HAND_OVER=shared`` (read at import) hands values over as they are, not copied:
#: only to measure what the copies cost (``python -m benchmarks bench_ab --variants current
#: shared-hand-over``); a write on either side then reaches the other, in one process only.
SHARED_HAND_OVER = os.environ.get("WORKBENCH_HAND_OVER") == "shared"


class StepMismatch(ValueError):
    """Per-step values that cannot be stacked: one step wrote another shape or type.

    ``part`` says where inside the value (``""`` for the value itself, ``"['a']"`` for a
    dict's key, ``"[1]"`` for a tuple's item); ``first`` and ``other`` are (step, what it
    wrote) for step 0 and the first step that differs from it. The runtime turns it into
    the producing fragment's error (it knows the fragment and the name).

    >>> try:
    ...     stack([np.zeros(1), np.zeros(2)])
    ... except StepMismatch as exc:
    ...     print(exc)
    step 0 wrote a float64 array of shape (1,), step 1 a float64 array of shape (2,)
    """

    def __init__(self, part: str, first: tuple[int, str], other: tuple[int, str]) -> None:
        super().__init__(f"step {first[0]} wrote {first[1]}, step {other[0]} {other[1]}")
        self.part, self.first, self.other = part, first, other


def handed_over(value: Any, _views: dict | None = None) -> Any:
    """The consuming fragment's own copy of a value another fragment wrote: the rule that
    makes a hand-over mean the same whatever the placement.

    Across processes a consumer always receives a copy; in one process it would otherwise
    get the producer's object, so a write on either side (``buf[0] += 1000`` in the actor,
    an env that refills its ``obs`` array in place) would leak across fragments inline and
    under GPUOnly but not on a cluster. Arrays (NumPy, CuPy, torch tensors, detached) are
    copied, and so are the dicts, lists and tuples holding them; other objects (modules,
    envs, buffers of your own classes) are handed over as they are in one process, so
    treat them as read-only there. A copy costs about 1 µs for the quickstart's per-step
    values (a [32, 4] array), against ~1.5 ms for the step itself.

    Tensors that are one view of one storage within a value (a tied embedding's two names in
    a state dict) get one copy, as they get one host array on the wire: the consumer's copy
    is tied as the producer's was, and a language model's embedding is not copied twice.

    >>> mine = {"buf": np.arange(3)}
    >>> theirs = handed_over(mine)
    >>> theirs["buf"] += 1000
    >>> mine["buf"].tolist(), theirs["buf"].tolist()
    ([0, 1, 2], [1000, 1001, 1002])
    """
    if SHARED_HAND_OVER:
        return value
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (str, bytes, int, float, bool, type(None), np.generic)):
        return value  # immutable, and by far the most common: the cheap exit first
    if type(value) is Unbatched:  # a plain env's step value: its inside is the reader's own too
        return Unbatched(handed_over(value.value, _views))
    # one memo for a whole container: its tensors that are one view stay one copy
    views = {} if _views is None and isinstance(value, (dict, list, tuple)) else _views
    if isinstance(value, dict):
        out = copy.copy(value)  # keeps the type and attributes (a state_dict's _metadata)
        for key, item in value.items():
            out[key] = handed_over(item, views)
        return out
    if type(value) is list:
        return [handed_over(item, views) for item in value]
    if isinstance(value, tuple):
        items = [handed_over(item, views) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if _is_torch(value) and hasattr(value, "detach"):
        return _tensor_copy(value, views)
    if _is_cupy(value) and hasattr(value, "copy"):
        return value.copy()
    return value


def _tensor_copy(tensor: Any, views: dict | None = None) -> Any:
    """A detached copy of ``tensor`` that keeps whether it is a Parameter and requires grad.
    With ``views`` (one value's memo), the same object gives the same copy and another name
    of the same data a new tensor over the same copy, as the wire restores them."""
    import torch

    if views is not None and id(tensor) in views:
        return views[id(tensor)][1]
    key = tensor_view_key(tensor) if views is not None else None
    data = views.get(key) if key is not None else None
    if data is None:
        data = tensor.detach().clone()
        if key is not None:
            views[key] = data
    else:
        data = data.detach()  # one more tensor over the copy: each name keeps its own type
    if isinstance(tensor, torch.nn.Parameter):  # as the wire restores it: a Parameter still
        out = torch.nn.Parameter(data, requires_grad=tensor.requires_grad)
    else:
        out = data.requires_grad_() if tensor.requires_grad and tensor.is_leaf else data
    if views is not None:
        views[id(tensor)] = (tensor, out)  # the source kept alive: its id stays its own
    return out


def tensor_view_key(tensor) -> tuple:
    """What makes two tensors the same data: the same first element's address, shape, strides,
    dtype and device (an empty tensor's address is 0: each is its own)."""
    if tensor.numel() == 0:
        return (id(tensor),)
    return tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device


def _is_array(x: Any) -> bool:
    """A NumPy, CuPy or torch array (a pandas object or a torch dtype is not)."""
    return isinstance(x, np.ndarray) or ((_is_torch(x) or _is_cupy(x)) and hasattr(x, "ndim"))


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def stack(values: list[Any], part: str = "") -> Any:
    """Stack per-step values into one value with a leading time axis. Raises
    :class:`StepMismatch` when the steps wrote different shapes, types, dict keys or tuple
    lengths (checked on the way: stacking alone would truncate tuples, drop keys, or
    quietly make an object array of ``None`` and numbers)."""
    first = values[0]
    if isinstance(first, (dict, tuple)):
        # containers: the same keys / length on every step, else zip and dict lookups lie
        layout = _layout(first)
        for t, v in enumerate(values):
            if type(v) is not type(first) or _layout(v) != layout:
                raise StepMismatch(part, (0, _describe(first)), (t, _describe(v)))
        if isinstance(first, dict):
            return {k: stack([v[k] for v in values], f"{part}[{k!r}]") for k in first}
        return tuple(stack(list(parts), f"{part}[{i}]") for i, parts in enumerate(zip(*values)))
    try:
        if _is_torch(first):
            import torch

            return torch.stack(values)
        if _is_cupy(first):
            import cupy

            return cupy.stack(values)
        out = np.stack([np.asarray(v) for v in values])
    except (ValueError, TypeError, RuntimeError) as exc:
        raise _mismatch(values, part) or exc
    if out.dtype == object and not (isinstance(first, np.ndarray) and first.dtype == object):
        # None (or a list) on some step among numbers: NumPy made an object array quietly
        # (the same odd value on every step is the cell's business: kept as before)
        mismatch = _mismatch(values, part)
        if mismatch is not None:
            raise mismatch
    return out


def _layout(value: Any) -> Any:
    return tuple(value) if isinstance(value, dict) else len(value)


def _describe(value: Any) -> str:
    """What a step wrote, in a few words: ``a float32 array of shape (4,)``, ``None``."""
    if value is None:
        return "None"
    if type(value) is Listed:
        return f"a list at every step (stacked: {_describe(value.value)})"
    if isinstance(value, dict):
        return f"a dict with keys {', '.join(map(repr, value))}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    shape = getattr(value, "shape", None)
    if shape is not None:
        dtype = str(getattr(value, "dtype", "")).removeprefix("torch.")
        kind = "tensor" if _is_torch(value) else "CuPy array" if _is_cupy(value) else "array"
        return f"a {dtype} {kind} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"


def _mismatch(values: list[Any], part: str) -> StepMismatch | None:
    """The first step whose value differs from step 0's in shape or type, if any."""
    first = _describe(values[0])
    for t, v in enumerate(values[1:], start=1):
        if _describe(v) != first:
            return StepMismatch(part, (0, first), (t, _describe(v)))
    return None


class ReplicasDisagree(ValueError):
    """Values gathered from several replicas that have no batch axis to join them on, and
    differ: the consumer cannot be given one value that means the same under every
    placement. ``part`` says where inside the value (as :class:`StepMismatch`);
    ``first``/``other`` are (replica, what it wrote). The runtime names the value, its
    producer and its reader.

    >>> try:
    ...     gather([0.0, 1.0])
    ... except ReplicasDisagree as exc:
    ...     print(exc)
    replica 0 wrote 0.0, replica 1 1.0
    """

    def __init__(self, part: str, first: tuple[int, str], other: tuple[int, str]) -> None:
        super().__init__(f"replica {first[0]} wrote {first[1]}, replica {other[0]} {other[1]}")
        self.part, self.first, self.other = part, first, other


class ReplicasMisfit(ReplicasDisagree):
    """Arrays gathered from several replicas that cannot be joined along the batch axis:
    another kind (array / tensor), another number of axes, or another size on an axis
    other than the batch axis.

    >>> try:
    ...     gather([np.zeros((2, 2)), np.zeros((2, 3))])
    ... except ReplicasMisfit as exc:
    ...     print(exc)
    replica 0 wrote a float64 array of shape (2, 2), replica 1 a float64 array of shape (2, 3)
    """


def _fits(first: Any, other: Any, axis: int) -> bool:
    """Whether ``other`` joins ``first`` along ``axis``."""
    if type(other) is not type(first) or other.ndim != first.ndim:
        return False
    return all(a == b for i, (a, b) in enumerate(zip(first.shape, other.shape)) if i != axis)


class Unbatched:
    """A replica's value that has no batch axis although it may be an array: a step value
    of an env fragment that steps one plain env (a scalar reward counts one env, so its
    ``obs`` of shape ``(4,)`` is one env's features, not four envs). The producing replica
    sends it so wrapped; `gather` then applies the rule for values without a batch axis
    (the one value, or an error) instead of joining replicas' features along axis 0.

    >>> gather([Unbatched(np.zeros(4)), Unbatched(np.zeros(4))]).shape
    (4,)
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self):
        return Unbatched, (self.value,)


class UnbatchedDisagree(ReplicasDisagree):
    """Replicas' values without a batch axis that differ, and that came from env replicas
    stepping one plain env each: the error says how to give them one."""


def unwrapped(value: Any) -> Any:
    """The value an `Unbatched` or a `StackedLists` holds (any other value as it is)."""
    if type(value) is StackedLists:
        return unmarked(value.value)
    return value.value if type(value) is Unbatched else value


def gather(values: list[Any], axis: int = 0, part: str = "") -> Any:
    """One value from one value per replica, by the rule that makes it mean the same under
    every placement (docs/boundaries.md):

    - arrays with a batch axis (``ndim > axis``) are concatenated along it, so replicas that
      each hold their share of the batch (``N // replica.count``) give the reader the same
      shape as one replica holding all ``N``;
    - dicts, tuples and lists are gathered item by item (a list of numbers is so the one
      list, or an error; a list of batches joins each);
    - anything else (numbers, bools, ``None``, strings, 0-d arrays, objects) has no axis
      to join on: when every replica wrote the same, the reader gets that one value (an
      ``obs_dim`` published by each env replica); when they differ it is an error
      (:class:`ReplicasDisagree`), never a list whose length depends on the placement.

    A stacked value whose parts were lists at every step comes marked
    (:mod:`workbench.runtime.values.stacked_lists`): NumPy made the lists' items axes after
    ``[T]``, which are not batch axes.

    >>> gather([np.zeros((2, 3)), np.ones((2, 5))], axis=1).shape
    (2, 8)
    >>> gather([4, 4]), gather([None, None]), gather([{"n": 4, "x": np.zeros(1)}] * 2)["x"].shape
    (4, None, (2,))
    >>> gather([[-1.0, 1.0], [-1.0, 1.0]]), gather([[np.zeros(2)], [np.ones(3)]])[0].shape
    ([-1.0, 1.0], (5,))
    """
    if any(type(v) is Unbatched for v in values):
        values = [unwrapped(v) for v in values]
        try:
            return values[0] if len(values) == 1 else _the_one_value(values, part)
        except ReplicasDisagree as exc:
            raise UnbatchedDisagree(exc.part, exc.first, exc.other) from None
    if any(type(v) is StackedLists for v in values):
        values = [v.value if type(v) is StackedLists else v for v in values]
        return unmarked(values[0]) if len(values) == 1 else _gather(values, axis, part)
    if len(values) == 1:
        return values[0]
    return _gather(values, axis, part)


def _gather(values: list[Any], axis: int, part: str) -> Any:
    """:func:`gather` of two or more values, no longer in an envelope."""
    first = values[0]
    if type(first) is Listed:
        return _gather_listed(values, axis, part)
    if isinstance(first, (dict, tuple)) or type(first) is list:
        for r, v in enumerate(values[1:], start=1):
            if type(v) is not type(first) or _layout(v) != _layout(first):
                raise ReplicasDisagree(part, (0, _describe(first)), (r, _describe(v)))
        if isinstance(first, dict):
            return {k: _gather([v[k] for v in values], axis, f"{part}[{k!r}]") for k in first}
        if (
            type(first) is list
            and all(type(x) in _PLAIN for x in first)
            and all(list(map(type, v)) == list(map(type, first)) and v == first for v in values[1:])
        ):
            return first  # the same numbers or strings on every replica (the common case), at once
        items = [_gather(list(parts), axis, f"{part}[{i}]") for i, parts in enumerate(zip(*values))]
        return items if type(first) is list else tuple(items)
    if _is_array(first) and first.ndim > axis:  # an array with a batch axis
        for r, v in enumerate(values[1:], start=1):
            if not _fits(first, v, axis):
                raise ReplicasMisfit(part, (0, _describe(first)), (r, _describe(v)))
        if _is_torch(first):
            import torch

            return torch.cat(values, dim=axis)
        if _is_cupy(first):
            import cupy

            return cupy.concatenate(values, axis=axis)
        return np.concatenate(values, axis=axis)
    return _the_one_value(values, part)


#: the types a list of which is compared whole (its items have no batch axis)
_PLAIN = (int, float, str, bool, type(None))


def _gather_listed(values: list[Any], axis: int, part: str) -> Any:
    """Replicas' stacked lists: joined along their items' batch axis, else the one value."""
    first = values[0]
    for r, v in enumerate(values[1:], start=1):
        if type(v) is not Listed or v.depth != first.depth:
            raise ReplicasMisfit(part, (0, _describe(first)), (r, _describe(v)))
    arrays = [v.value for v in values]
    at = axis + first.depth
    if arrays[0].ndim > at:  # the list's items have a batch axis: join each
        return _gather(arrays, at, part)
    for r, other in enumerate(arrays[1:], start=1):
        if not _same(arrays[0], other):  # what two replicas' lists were at the first step they differ
            t = next((t for t, (a, b) in enumerate(zip(arrays[0], other)) if not _same(a, b)), 0)
            said = [_short_text(a[t].tolist()) for a in (arrays[0], other)]
            raise ReplicasDisagree(part, (0, f"{said[0]} at step {t}"), (r, said[1]))
    return arrays[0]


def _short_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _the_one_value(values: list[Any], part: str) -> Any:
    """The rule for values without a batch axis: the one value every replica wrote."""
    first = values[0]
    for r, v in enumerate(values[1:], start=1):
        if not _same(first, v):
            said_first, said_other = _contrast(first, v)
            raise ReplicasDisagree(part, (0, said_first), (r, said_other))
    return first


def _contrast(a: Any, b: Any) -> tuple[str, str]:
    """How two unequal values differ, in words that differ: :func:`_show`'s, unless those
    are the same (two 0-d arrays, two long strings with one prefix, two objects of one
    type), then the part of their text where they first differ; and where even their full
    text is the same, that they compare unequal by ``==`` (an object without ``__eq__``).

    >>> _contrast(np.array(1.0), np.array(2.0))
    ('a float64 array of shape () holding 1.0', 'a float64 array of shape () holding 2.0')
    >>> _contrast("x" * 50 + "a", "x" * 50 + "b")
    ("a str …xxxxxxxxxxxxxxxxxxxxa'", "a str …xxxxxxxxxxxxxxxxxxxxb'")
    """
    shown = _show(a), _show(b)
    if shown[0] != shown[1]:
        return shown
    texts = [_text(v) for v in (a, b)]
    if texts[0] == texts[1] or type(b).__eq__ is object.__eq__:
        return (
            f"{shown[0]} ({texts[0][:40]})",
            f"another {type(b).__name__}, unequal to it by == (a {type(b).__name__} without "
            "__eq__ compares by identity: define __eq__, or write a plain value)",
        )
    at = next((i for i, (x, y) in enumerate(zip(*texts)) if x != y), min(map(len, texts)))
    start = max(0, at - 20)
    window = [("…" if start else "") + t[start : at + 20] + ("…" if len(t) > at + 20 else "") for t in texts]
    if shown[0].startswith("a ") and not shown[0].startswith(("a dict", "a tuple", "a list")):
        holds = " holding " if start == 0 and len(window[0]) < 60 else " "
        return shown[0] + holds + window[0], shown[1] + holds + window[1]
    return f"a {type(a).__name__} {window[0]}", f"a {type(b).__name__} {window[1]}"


def _text(value: Any) -> str:
    """A value's full text: an array's (or tensor's) values, anything else's repr."""
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        try:
            return repr(value.tolist())
        except Exception:  # a device tensor that cannot be read here: its repr
            pass
    try:
        return repr(value)
    except Exception:  # a repr that raises: the type is all there is
        return f"<{type(value).__name__}>"


def _same(a: Any, b: Any) -> bool:
    """Whether two replicas wrote the same thing (NaN equal to NaN, arrays by content)."""
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        if _is_torch(a) and hasattr(a, "shape"):
            import torch

            a, b = a.cpu(), b.cpu()
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.is_floating_point() or a.is_complex():  # NaN equal to NaN, as NumPy's above
                return bool(((a == b) | (a.isnan() & b.isnan())).all())
            return bool(torch.equal(a, b))
        if _is_cupy(a):
            import cupy

            return a.shape == b.shape and bool(cupy.array_equal(a, b))
        if isinstance(a, (float, np.floating, np.complexfloating)) and a != a:
            return b != b
        if type(a) in (list, tuple):  # item by item: a list of arrays too
            return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
        if type(a) is dict:
            return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
        return bool(a == b)
    except Exception:  # an object whose == raises or is not a bool: not provably the same
        return False


def _show(value: Any) -> str:
    """A scalar as it is; anything bigger as :func:`_describe` says it."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return _describe(value)


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
