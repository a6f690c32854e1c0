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
an object of a class whose  its attributes (set again on the object of the same class the
attributes are all of the   init cell builds: a user's replay buffer of NumPy arrays)
above
==========================  ==============================================================

Anything else (a gymnasium env, a lock, an object holding one) is *not saved*: the
fragment's init cell creates it again on restore, which is why restoring always runs the
init cell first and then lays the saved values over its namespace (:func:`restore_into`).
:func:`unsaved_data` names those that hold data (not modules, functions or classes), for
the warning a run gives at its first checkpoint.

Restoring checks that each array fits what the init cell builds now (its number of axes
and every axis but the first — the first may grow, like a list of returns; weights and a
``state_dict``'s arrays must match whole, dtype included), so a changed observation shape
is an error naming the value, not a silent mix of old and new. Where the init cell's
statements that make a name changed since the checkpoint, the saved value must also be of
the new first value's kind (:mod:`workbench.runtime.state.resume_checks`).

Example:
    >>> import numpy as np
    >>> saved, skipped = encode_state({"n": 3, "obs": np.zeros((8, 4), np.float32), "f": print})
    >>> sorted(saved), skipped
    (['n', 'obs'], ['f'])
    >>> ns = {"n": 0}
    >>> restore_into(ns, saved)
    []
    >>> ns["n"], ns["obs"].dtype
    (3, dtype('float32'))
    >>> restore_into({"obs": np.zeros((8, 6), np.float32)}, saved)
    Traceback (most recent call last):
    ...
    ValueError: 'obs' does not fit what the init cell builds now: the checkpoint holds a float32 array of shape (8, 4), the init cell a float32 array of shape (8, 6). ...
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from workbench.loaded_modules import loaded
from workbench.runtime.state.resume_checks import EDITED_KEY, MISSING, check_edited, replaced_notes

__all__ = ["PortableState", "encode_state", "decode_value", "restore_into", "unsaved_data", "type_label"]

_PLAIN = (int, float, bool, str, bytes, type(None))


class PortableState(dict):
    """One fragment replica's encoded state (name → encoded value). A replica given one
    runs the fragment's init cell and then lays these values over its namespace."""


class _Unsupported(Exception):
    pass


def encode_state(values: dict[str, Any]) -> tuple[PortableState, list[str]]:
    """Encode a fragment's state; return (saved, names left to the init cell)."""
    from workbench.runtime.state.counting import REBUILT_KEY

    saved, skipped = PortableState(), list(values.get(REBUILT_KEY) or ())  # a snapshot left them out
    for name, value in values.items():
        if name == REBUILT_KEY:
            continue
        try:
            saved[name] = _encode(value)
        except _Unsupported:
            skipped.append(name)
    return saved, skipped


def unsaved_data(values: dict[str, Any], skipped: list[str]) -> list[str]:
    """Of the ``skipped`` names, those that hold data a run may miss after a resume, as
    "name (a TYPE)" — not modules, functions or classes, which the init cell defines.

    >>> import threading
    >>> unsaved_data({"lock": threading.Lock(), "np": np, "f": print}, ["lock", "np", "f"])
    ['lock (a _thread.lock)']
    """
    import types

    from workbench.runtime.state.counting import REBUILT_KEY

    code = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
    rebuilt = values.get(REBUILT_KEY) or {}  # a snapshot left these out: name → type_label
    out = []
    for name in skipped:
        if name in rebuilt:
            out.append(f"{name} ({rebuilt[name]})")
        elif not isinstance(values.get(name), code):
            out.append(f"{name} ({type_label(values.get(name))})")
    return out


def type_label(value: Any) -> str:
    """ "a TYPE" with its module, as messages name a value's type: ``a __main__.Buffer``."""
    cls = type(value)
    return f"a {cls.__qualname__}" if cls.__module__ == "builtins" else f"a {cls.__module__}.{cls.__qualname__}"


def decode_value(enc: Any) -> Any:
    """One encoded value back as plain values (tensors, arrays, containers).

    >>> decode_value(encode_state({"t": (1, [2.0])})[0]["t"])
    (1, [2.0])
    """
    return _decode(enc, None)


def restore_into(ns: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """Lay encoded values over a namespace the init cell has just filled; return what to
    say about it: for each name whose init binding changed since the checkpoint, a note
    where the saved value replaces another one the edited cell built
    (:func:`~workbench.runtime.state.resume_checks.replaced_notes`).

    Names whose init binding changed since the checkpoint (marked by a resume) are checked
    first, before anything is laid over: another kind of value than the edited cell's is
    refused (:func:`~workbench.runtime.state.resume_checks.check_edited`). Then networks, then
    optimisers (they cast their state to their parameters' devices), then other stateful
    objects, then plain values.
    """
    edited = saved.get(EDITED_KEY) or {}
    marked = [name for name in saved if name in edited.get("names", ())]
    for name in marked:
        check_edited(name, saved[name], ns.get(name, MISSING), edited)
    # compared before anything is laid over: networks and objects are restored in place
    notes = replaced_notes({name: ns.get(name, MISSING) for name in marked}, saved, edited)
    order = {"module": 0, "optimizer": 1, "stateful": 2}
    for name, enc in sorted(saved.items(), key=lambda kv: order.get(_kind(kv[1]), 3)):
        if name == EDITED_KEY:
            continue
        kind = _kind(enc)
        if kind in order:
            target = ns.get(name)
            if target is None or not hasattr(target, "load_state_dict"):
                raise ValueError(
                    f"the checkpoint holds the state of {name!r} (a {kind}), but the fragment's "
                    f"init cell did not create {name!r} to load it into."
                )
            if kind != "optimizer":  # an optimiser's state is empty until its first step
                _check_fits(f"{name}.state_dict()", enc["value"], _current_state(target), whole=True)
            try:
                target.load_state_dict(_decode(enc["value"], None))
            except Exception as exc:
                raise ValueError(
                    f"{name!r} (a {kind}) does not take the saved state: {type(exc).__name__}: {exc}"
                ) from exc
        elif kind == "object":
            _restore_object(name, enc, ns.get(name))
        else:
            _check_fits(name, enc, ns.get(name), whole=False)
            ns[name] = _decode(enc, ns.get(name))
    return notes


def _current_state(target: Any) -> Any:
    try:
        return target.state_dict()
    except Exception:  # it will say so itself in load_state_dict
        return None


def _restore_object(name: str, enc: dict, target: Any) -> None:
    """Set a saved object's attributes on the object of the same class the init cell built."""
    cls = enc["class"]
    if target is None or _class_name(target) != cls:
        built = "nothing" if target is None else f"a {_class_name(target)}"
        raise ValueError(
            f"the checkpoint holds {name!r}, a {cls} saved by its attributes, but the "
            f"fragment's init cell built {built} under that name to set them on."
        )
    for attr, value in enc["value"]:
        _check_fits(f"{name}.{attr}", value, getattr(target, attr, None), whole=False)
        object.__setattr__(target, attr, _decode(value, getattr(target, attr, None)))


def _class_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _check_fits(name: str, enc: Any, current: Any, *, whole: bool) -> None:
    """Raise ValueError when a saved array does not fit the one the init cell built now
    (``whole``: every axis must match — weights; else all but the first, which may grow).
    Recurses through dicts, lists and state_dicts; a value the init cell did not build is
    not checked."""
    kind = _kind(enc)
    if kind in ("ndarray", "cupy", "tensor"):
        saved_shape, saved_dtype = tuple(enc["value"].shape), enc.get("dtype")
        shape = getattr(current, "shape", None)
        if shape is None or not hasattr(current, "dtype"):
            return
        shape = tuple(shape)
        # a plain array's dtype may change between cells (an init cell's float64 zeros, a
        # step cell's float32 observations): only weights and state_dicts must keep theirs
        same_dtype = not whole or str(_dtype_name(saved_dtype, enc["value"])) == str(_dtype_name(None, current))
        same_shape = (
            shape == saved_shape if whole else (len(shape) == len(saved_shape) and shape[1:] == saved_shape[1:])
        )
        if not (same_dtype and same_shape):
            raise ValueError(
                f"{repr(name) if name.isidentifier() else name} does not fit what the init cell builds now: "
                f"the checkpoint holds "
                f"{_describe(enc)}, the init cell {_describe_live(current)}. It builds it otherwise "
                "than the run that wrote the checkpoint: the fragment's cells changed since, or a "
                "notebook value they read (a size in a config) is not what it was then. Resume "
                "with the cells and values it came from (wb.FDG.from_checkpoint(DIR) rebuilds the "
                "cells), or start a new run."
            )
        return
    if kind == "dict" or (kind is None and isinstance(enc, dict)):
        items = enc["value"] if kind == "dict" else list(enc.items())
        if isinstance(current, dict):
            for key, value in items:
                if key in current:
                    _check_fits(f"{name}[{key!r}]", value, current[key], whole=whole)
    elif kind in ("list", "tuple") and isinstance(current, (list, tuple)) and len(current) == len(enc["value"]):
        for i, (value, now) in enumerate(zip(enc["value"], current)):
            _check_fits(f"{name}[{i}]", value, now, whole=whole)


def _dtype_name(saved: str | None, value: Any) -> str:
    """A dtype's plain name (float32), for a NumPy dtype string, a torch or a NumPy value."""
    if saved:
        return np.dtype(saved).name
    name = str(value.dtype).replace("torch.", "")
    try:
        return np.dtype(name).name
    except TypeError:  # a torch dtype NumPy lacks (bfloat16)
        return name


def _describe(enc: dict) -> str:
    noun = "tensor" if enc["__kind__"] == "tensor" else "array"
    return f"a {_dtype_name(enc.get('dtype'), enc['value'])} {noun} of shape {tuple(enc['value'].shape)}"


def _describe_live(value: Any) -> str:
    noun = "tensor" if type(value).__module__.startswith("torch") else "array"
    return f"a {_dtype_name(None, value)} {noun} of shape {tuple(value.shape)}"


def _kind(enc: Any) -> str | None:
    return enc.get("__kind__") if isinstance(enc, dict) else None


def _encode(value: Any) -> Any:
    torch = loaded("torch")
    if isinstance(value, np.generic):  # before _PLAIN: np.float64 is a float, yet torch's
        return value.item()  # weights_only loader refuses NumPy scalars
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
    if _plain_object(value):
        return _encode_object(value)
    raise _Unsupported


def _plain_object(value: Any) -> bool:
    """An instance of a user class (not a library's, whose objects hold more than data)
    with a ``__dict__``: candidates for saving by attributes."""
    module = type(value).__module__.split(".")[0]
    return (
        hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value) and module not in _LIBRARIES
    )


#: modules whose objects are never saved by attributes: their state is not plain data
_LIBRARIES = frozenset(
    {
        "builtins",
        "numpy",
        "torch",
        "cupy",
        "gymnasium",
        "gym",
        "distributed",
        "dask",
        "threading",
        "socket",
        "io",
        "ssl",
        "asyncio",
        "multiprocessing",
        "workbench",
    }
)


def _encode_object(value: Any) -> dict:
    attrs = []
    for attr, item in vars(value).items():
        if _plain_object(item):  # one level only: an object graph could be cyclic
            raise _Unsupported
        attrs.append([attr, _encode(item)])
    return {"__kind__": "object", "class": _class_name(value), "value": attrs}


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
    if kind == "object":
        raise ValueError("an object saved by its attributes is restored onto the one the init cell builds")
    raise ValueError(f"unknown value kind {kind!r} in a checkpoint")
