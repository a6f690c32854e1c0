"""Fragment state as tensors and plain values: what a checkpoint file may hold.

A replica's namespace holds live objects — networks, optimisers, environments, random
generators, arrays, counters. A checkpoint must load with ``torch.load(weights_only=True)``
(no pickle: loading a checkpoint must never run code), so each value is *encoded* as
tensors, numbers, strings and containers of those:

==========================  ==============================================================
value                       saved as (restored by)
==========================  ==============================================================
``torch.nn.Module``         its ``state_dict()`` (``load_state_dict`` into the object the
                            fragment's init cell builds again)
``torch.optim.Optimizer``   its ``state_dict()`` (same)
anything with ``state_dict`` its ``state_dict()`` (same: LR schedulers, workbench's envs)
and ``load_state_dict``
``torch.Tensor``            a CPU tensor (moved back to the device the init cell used)
NumPy / CuPy array          a tensor plus its dtype name
NumPy ``Generator``         its bit generator's state (plain ints)
``random.Random``           its ``getstate()``
numbers, str, None, bytes,  themselves, recursively
lists, tuples, dicts
==========================  ==============================================================

Anything else (a gymnasium env, a function, a lock) is *not saved*: the fragment's init
cell creates it again on restore, which is why restoring always runs the init cell first
and then lays the saved values over its namespace (:func:`restore_into`).

Example:
    >>> import numpy as np
    >>> saved, skipped = encode_state({"n": 3, "obs": np.zeros(2, np.float32), "f": print})
    >>> sorted(saved), skipped
    (['n', 'obs'], ['f'])
    >>> ns = {"n": 0}
    >>> restore_into(ns, saved)
    >>> ns["n"], ns["obs"].dtype
    (3, dtype('float32'))
"""
from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np

__all__ = ["PortableState", "encode_state", "restore_into"]

_PLAIN = (int, float, bool, str, bytes, type(None))


class PortableState(dict):
    """One fragment replica's encoded state (name → encoded value). A replica given one
    runs the fragment's init cell and then lays these values over its namespace."""


class _Unsupported(Exception):
    pass


def encode_state(values: dict[str, Any]) -> tuple[PortableState, list[str]]:
    """Encode a fragment's state; return (saved, names left to the init cell)."""
    saved, skipped = PortableState(), []
    for name, value in values.items():
        try:
            saved[name] = _encode(value)
        except _Unsupported:
            skipped.append(name)
    return saved, skipped


def restore_into(ns: dict[str, Any], saved: dict[str, Any]) -> None:
    """Lay encoded values over a namespace the init cell has just filled.

    Networks first, then optimisers (they cast their state to their parameters'
    devices), then other stateful objects, then plain values.
    """
    order = {"module": 0, "optimizer": 1, "stateful": 2}
    for name, enc in sorted(saved.items(), key=lambda kv: order.get(_kind(kv[1]), 3)):
        kind = _kind(enc)
        if kind in order:
            target = ns.get(name)
            if target is None or not hasattr(target, "load_state_dict"):
                raise ValueError(
                    f"the checkpoint holds the state of {name!r} (a {kind}), but the fragment's "
                    f"init cell did not create {name!r} to load it into."
                )
            try:
                target.load_state_dict(_decode(enc["value"], None))
            except Exception as exc:
                raise ValueError(f"{name!r} (a {kind}) does not take the saved state: "
                                 f"{type(exc).__name__}: {exc}") from exc
        else:
            ns[name] = _decode(enc, ns.get(name))


def _kind(enc: Any) -> str | None:
    return enc.get("__kind__") if isinstance(enc, dict) else None


def _encode(value: Any) -> Any:
    torch = sys.modules.get("torch")
    if isinstance(value, np.generic):  # before _PLAIN: np.float64 is a float, yet torch's
        return value.item()            # weights_only loader refuses NumPy scalars
    if torch is not None:
        if isinstance(value, torch.nn.Module):
            return {"__kind__": "module", "value": _encode(value.state_dict())}
        if isinstance(value, torch.optim.Optimizer):
            return {"__kind__": "optimizer", "value": _encode(value.state_dict())}
        if isinstance(value, torch.Tensor):
            return {"__kind__": "tensor", "value": value.detach().to("cpu", copy=True)}
    if isinstance(value, np.ndarray):
        return _encode_array(value, "ndarray")
    if type(value).__module__.startswith("cupy") and hasattr(value, "get"):
        return _encode_array(value.get(), "cupy")
    if isinstance(value, np.random.Generator):
        return {"__kind__": "np_generator", "value": value.bit_generator.state}
    if isinstance(value, random.Random):
        return {"__kind__": "random", "value": _encode(value.getstate())}
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return {"__kind__": "stateful", "value": _encode(value.state_dict())}
    if isinstance(value, (list, tuple)):
        return {"__kind__": type(value).__name__, "value": [_encode(v) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) for k in value):
            raise _Unsupported
        items = [[k, _encode(v)] for k, v in value.items()]
        return {"__kind__": "dict", "value": items}
    if isinstance(value, _PLAIN):
        return value
    raise _Unsupported


def _encode_array(array: np.ndarray, kind: str) -> dict:
    import torch

    if array.dtype.kind not in "biuf" or array.dtype.byteorder == ">":
        raise _Unsupported
    try:
        tensor = torch.from_numpy(np.ascontiguousarray(array).copy())
    except TypeError:  # a dtype torch lacks: keep it out rather than lose precision
        raise _Unsupported from None
    return {"__kind__": kind, "value": tensor, "dtype": array.dtype.str}


def _decode(enc: Any, current: Any) -> Any:
    if not isinstance(enc, dict) or "__kind__" not in enc:
        if isinstance(enc, dict):  # a state_dict's plain dict (module / optimizer state)
            return {k: _decode(v, None) for k, v in enc.items()}
        return enc
    kind, value = enc["__kind__"], enc["value"]
    if kind == "tensor":
        device = getattr(current, "device", None)
        return value.to(device) if device is not None else value
    if kind in ("ndarray", "cupy"):
        array = value.numpy().astype(np.dtype(enc["dtype"]), copy=False)
        if kind == "cupy":
            import cupy

            return cupy.asarray(array)
        return array
    if kind == "np_generator":
        generator = np.random.Generator(getattr(np.random, value["bit_generator"])())
        generator.bit_generator.state = value
        return generator
    if kind == "random":
        rng = random.Random()
        rng.setstate(_decode(value, None))
        return rng
    if kind == "list":
        return [_decode(v, None) for v in value]
    if kind == "tuple":
        return tuple(_decode(v, None) for v in value)
    if kind == "dict":
        return {k: _decode(v, None) for k, v in value}
    if kind in ("module", "optimizer", "stateful"):
        return _decode(value, None)
    raise ValueError(f"unknown value kind {kind!r} in a checkpoint")
