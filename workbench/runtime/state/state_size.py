"""How many bytes a replica's state would pickle to, without pickling its arrays.

The snapshot pacer (:mod:`workbench.runtime.state.snapshot_pacing`) must know whether a learner's
state is big before it takes the first snapshot: pickling a 113M-parameter model with Adam's
moments and a reference copy is ~2 GB and seconds of the critical path (on a GPU, a
device-to-host copy of all of it), which a run of short iterations should not pay to find
out. This walks the state as the snapshot's own pickler would, but counts each tensor's and
array's bytes instead of copying them, so it costs what pickling the state's structure costs
(milliseconds for a transformer).

Example:
    >>> import numpy as np
    >>> state_nbytes({"learner": {"w": np.zeros(1000), "step": 3}}) >= 8000
    True
"""

from __future__ import annotations

from typing import Any

from workbench.runtime.values.arrays import tensor_view_key
from workbench.runtime.transport.channels import StatePickler

__all__ = ["state_nbytes"]


class _Discard:
    """A file that keeps only its length."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data) -> int:
        self.written += len(data)
        return len(data)


def _array_nbytes(obj, seen: set) -> int | None:
    """The data bytes of a tensor, a NumPy or a CuPy array (None: not one); 0 for a view of
    a tensor's data already counted (the snapshot writes it once)."""
    module, name = type(obj).__module__, type(obj).__name__
    if module.startswith("torch") and name in ("Tensor", "Parameter"):
        key = tensor_view_key(obj)
        if key in seen:
            return 0
        seen.add(key)
        return obj.element_size() * obj.nelement()
    if (module.startswith("numpy") or module.startswith("cupy")) and name == "ndarray":
        return int(obj.nbytes)
    return None


class _SizingPickler(StatePickler):
    def __init__(self, file: _Discard) -> None:
        super().__init__(file, protocol=5)
        self.array_bytes = 0
        self._views: set = set()

    def reducer_override(self, obj):
        nbytes = _array_nbytes(obj, self._views)
        if nbytes is None:
            return super().reducer_override(obj)
        self.array_bytes += nbytes
        return int, ()  # a placeholder: the bytes are counted, never copied


def state_nbytes(value: Any) -> int:
    """About the bytes :func:`~workbench.runtime.transport.channels.dumps_state` gives for ``value``:
    its structure's pickle plus each tensor's and array's data."""
    sink = _Discard()
    pickler = _SizingPickler(sink)
    pickler.dump(value)
    return sink.written + pickler.array_bytes
