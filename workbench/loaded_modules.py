"""A module another part of the process has imported *all the way*, or None.

workbench looks at ``sys.modules`` instead of importing torch or CuPy itself (an import of
torch costs ~1.5 s, and a run that never uses it must not pay that). But a module appears in
``sys.modules`` as soon as its import *starts*: while one thread imports torch (the
checkpoint writer, a cell), another that found it there read a half-built module —
``partially initialized module 'torch' has no attribute 'get_rng_state'`` ended inline runs
that wrote checkpoints, in 6 of 8 tries. A module still being imported counts as not
imported: nothing has used it yet, so there is nothing of it to save or set.

CPython itself marks a module being imported with ``__spec__._initializing``
(``importlib._bootstrap``), which is what this reads.

    >>> import json
    >>> loaded("json") is json, loaded("a_module_nobody_imported")
    (True, None)
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["loaded"]


def loaded(name: str) -> ModuleType | None:
    """``sys.modules[name]`` once its import has finished; None before, or while another
    thread is still importing it."""
    module = sys.modules.get(name)
    if module is None:
        return None
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module
