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

A run of several stretches (a live change ends one at a boundary, the next deploys the
change) gives each later stretch what the first was given, except the names sent since
with ``%fdg update`` and names a cell reads for the first time: :func:`values_for_stretch`.
It changes nothing it is given: it returns the values to deploy and what to keep for the
stretches after, and the trainer keeps them (:class:`workbench.trainer.TrainerState`).
Before 2026-12-01 each stretch read the notebook as it was, so ``cfg.lr = 0.5`` typed in a
cell and never sent reached the learner at the next boundary of any other change (an
``%fdg update`` of another name, a re-run cell), and the run's events named only that
change.

>>> notebook = {"cfg": cfg, "scale": 1.0}
>>> first = values_for_stretch({}, set(), notebook, ["cfg", "scale"])   # the first stretch
>>> first.values["cfg"].lr
0.001
>>> cfg.lr, notebook["scale"] = 0.5, 2.0       # typed in a cell; only scale is sent
>>> later = values_for_stretch(first.given, {"scale"}, notebook, ["cfg", "scale"])
>>> later.values["cfg"].lr, later.values["scale"]
(0.001, 2.0)
"""

from __future__ import annotations

import copy
import types
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

__all__ = ["taken_at_deploy", "values_for_stretch", "StretchValues"]

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


class StretchValues(NamedTuple):
    """What :func:`values_for_stretch` gives: the values a stretch deploys with, and the
    values to give the stretches after (the trainer keeps them)."""

    #: name → the value this stretch deploys with
    values: dict[str, Any]
    #: name → the value each later stretch is given unless the name is sent again
    given: dict[str, Any]


def values_for_stretch(
    given: Mapping[str, Any], sent: Collection[str], namespace: Mapping[str, Any], names
) -> StretchValues:
    """The values a stretch of a run deploys with, for the ``names`` its cells read that
    ``namespace`` holds: the earlier stretches' copy in ``given``, unless the name was
    ``sent`` since (``fdg.update``) or no stretch read it before; those are copied now, and
    returned in ``given`` for the stretches after. ``given`` itself is not changed."""
    fresh = {n: namespace[n] for n in names if n in namespace and (n in sent or n not in given)}
    kept = {**given, **taken_at_deploy(fresh)}
    return StretchValues({n: kept[n] for n in names if n in namespace}, kept)
