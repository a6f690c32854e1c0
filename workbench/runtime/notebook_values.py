"""The notebook values a stretch of a run reads, as they were when it started.

On a cluster every replica receives a pickled copy of the notebook names its fragments
read, taken when the stretch deploys: changing a notebook object afterwards
(``cfg.learning_rate = 1e-3``) changes nothing there until ``%fdg update cfg`` ends the
stretch at an exact iteration boundary and the next one deploys the new value. In the
kernel's own process (inline, gpuonly) the replicas would otherwise hold the notebook's
very objects, so the same line would reach a running cell at once, mid-iteration, and the
boundary the run records would be wrong. :func:`taken_at_deploy` gives an in-process
stretch its own copies, so a change means the same under every placement.

Modules, classes and functions are shared (they are code, and ``copy.deepcopy`` shares
functions and classes anyway); a value that cannot be deep-copied (a lock, a generator, an
open file: what a cluster could not send either) is shared as it is.

>>> class Config:
...     lr = 3e-3
>>> cfg = Config()
>>> mine = taken_at_deploy({"cfg": cfg})
>>> cfg.lr = 1e-3
>>> mine["cfg"].lr
0.003
"""
from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["taken_at_deploy"]

_SHARED = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def taken_at_deploy(values: Mapping[str, Any]) -> dict[str, Any]:
    """Name → this stretch's own copy of the notebook's value (see the module's doc)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, _SHARED):
            out[name] = value
            continue
        try:
            out[name] = copy.deepcopy(value)
        except Exception:  # noqa: BLE001 — not copyable (a lock, a generator): shared as is
            out[name] = value
    return out
