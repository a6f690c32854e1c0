"""A trial's settings (``"cfg.lr": 3e-3``) checked against the notebook and applied to a copy.

A setting names a field of an object the notebook defines, as ``workbench run --set`` does:
``NAME.FIELD`` where ``NAME`` is a dataclass, a dict or an object of the user's own class.
Pure: the namespace given is never changed; the objects a trial changes are copied first
(a worker's trials share the shipped notebook objects).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Config:
    ...     seed: int = 1
    ...     lr: float = 0.1
    >>> ns = {"cfg": Config()}
    >>> check_settings(ns, {"cfg.lr": [1e-3, 3e-3]})
    >>> with_settings(ns, {"cfg.lr": 1e-3, "cfg.seed": 4})["cfg"], ns["cfg"]
    (Config(seed=4, lr=0.001), Config(seed=1, lr=0.1))
    >>> check_settings(ns, {"cfg.lrr": [1e-3]})
    Traceback (most recent call last):
    ...
    workbench.errors.RunConfigError: sweep over 'cfg.lrr': Config has no field 'lrr' (did you mean 'lr'?); its fields: seed, lr.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
from collections.abc import Mapping
from typing import Any

from workbench.errors import RunConfigError

__all__ = ["check_settings", "with_settings", "fields_of"]


def _split(key: Any) -> tuple[str, str]:
    name, dot, field = key.partition(".") if isinstance(key, str) else ("", "", "")
    if not dot or not name.isidentifier() or not field.isidentifier():
        raise RunConfigError(
            f"sweep over {key!r}: name a field of a notebook object as NAME.FIELD, e.g. 'cfg.learning_rate'."
        )
    return name, field


def fields_of(obj: Any) -> list[str] | None:
    """What a setting may change on ``obj``: a dataclass's fields, a dict's keys that are
    names, an object's public plain attributes (its class's included); None for a number,
    a string, a module."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [f.name for f in dataclasses.fields(obj)]
    if isinstance(obj, dict):
        return [k for k in obj if isinstance(k, str) and k.isidentifier()]
    if not hasattr(obj, "__dict__") or inspect.ismodule(obj) or isinstance(obj, type):
        return None
    found: dict[str, None] = {}
    for owner in [*reversed(type(obj).__mro__[:-1]), obj]:
        for key, value in vars(owner).items():
            if not key.startswith("_") and not (
                callable(value) or isinstance(value, (property, classmethod, staticmethod))
            ):
                found[key] = None
    return list(found)


def _current(obj: Any, field: str) -> Any:
    return obj[field] if isinstance(obj, dict) else getattr(obj, field)


def _fits(current: Any, value: Any) -> Any:
    """``value`` as the field's type (an int for a float field becomes a float), or raises
    ``TypeError``."""
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if current is not None and (
        not isinstance(value, type(current)) or isinstance(value, bool) != isinstance(current, bool)
    ):
        raise TypeError(f"is a {type(current).__name__} ({current!r}); {value!r} is a {type(value).__name__}")
    return value


def check_settings(namespace: Mapping[str, Any], over: Mapping[str, Any]) -> None:
    """Raise :class:`RunConfigError` unless every key of ``over`` is a field of a notebook
    object and every value listed fits that field's type."""
    for key, values in over.items():
        name, field = _split(key)
        if name not in namespace:
            raise RunConfigError(
                f"sweep over {key!r}: the notebook defines no {name!r}; the sweep sets fields "
                "of objects the notebook defines, e.g. 'cfg.seed' for cfg = PPOConfig()."
            )
        obj = namespace[name]
        fields = fields_of(obj)
        if fields is None:
            raise RunConfigError(
                f"sweep over {key!r}: {name} is a {type(obj).__name__}, which has no fields; "
                "sweep fields of a dataclass, a dict or an object of your own class."
            )
        if field not in fields:
            hint = difflib.get_close_matches(field, fields, n=1)
            raise RunConfigError(
                f"sweep over {key!r}: {type(obj).__name__} has no field {field!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; its fields: {', '.join(fields)}."
            )
        for value in values:
            try:
                _fits(_current(obj, field), value)
            except TypeError as exc:
                raise RunConfigError(f"sweep over {key!r}: {key} {exc}.") from None


def with_settings(namespace: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """A new namespace: ``namespace`` with each ``NAME.FIELD`` of ``settings`` set, on a copy
    of that object (a frozen dataclass through ``dataclasses.replace``)."""
    out = dict(namespace)
    copied: set[str] = set()
    for key, value in settings.items():
        name, field = _split(key)
        obj = out[name]
        value = _fits(_current(obj, field), value)
        if dataclasses.is_dataclass(obj) and type(obj).__dataclass_params__.frozen:
            out[name] = dataclasses.replace(obj, **{field: value})
            copied.add(name)
            continue
        if name not in copied:
            obj = out[name] = copy.copy(obj)
            copied.add(name)
        if isinstance(obj, dict):
            obj[field] = value
        else:
            setattr(obj, field, value)
    return out
