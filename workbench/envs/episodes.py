"""Episode statistics that stay on the env's device until someone reads them.

A GPU env finishes episodes in every step, but which envs finished is only known on the
device; copying each step's few returns to the host would make the GPU wait once per step.
`EndedEpisodes` holds the step's per-env values and the mask of envs that ended, both on
the device, and compacts them on the host only when read — ``wb.log`` defers the read to
the end of the iteration, where one copy carries every step's episodes at once.

On the host it reads like the 1-D array of the ended episodes' values that the NumPy envs
give (``info["episode_return"]``): ``len``, iteration, ``np.asarray``, ``.tolist()``.

Example:
    >>> import numpy as np
    >>> done = np.array([False, True, False, True])
    >>> ended = EndedEpisodes(np.array([3.0, 17.0, 5.0, 9.0], np.float32), done)
    >>> len(ended), ended.tolist()
    (2, [17.0, 9.0])
    >>> float(np.mean(ended))
    13.0
    >>> merged = EndedEpisodes.concatenate([ended, ended])
    >>> merged.tolist()
    [17.0, 9.0, 17.0, 9.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EndedEpisodes"]


class EndedEpisodes:
    """The values of the episodes that ended at one step, as ``values[ended]``, kept on
    the values' device (NumPy or CuPy) until read.

    Args:
        values: ``[N]``, one value per env (meaningful where ``ended``).
        ended: ``[N]`` bool, True for the envs whose episode ended at this step.
    """

    __slots__ = ("values", "ended")
    #: ``wb.log`` keeps such a value as it is and reads it at the end of the iteration
    deferred_metric = True

    def __init__(self, values: Any, ended: Any) -> None:
        self.values, self.ended = values, ended

    @property
    def on_host(self) -> bool:
        return isinstance(self.values, np.ndarray)

    def get(self) -> np.ndarray:
        """The ended episodes' values on the host, in env order (one device→host copy)."""
        picked = self.values[self.ended]
        return picked if isinstance(picked, np.ndarray) else picked.get()

    @staticmethod
    def concatenate(parts: list[EndedEpisodes]) -> EndedEpisodes:
        """Several steps' episodes as one (step by step, env order within a step), so a
        whole iteration's episodes cross to the host in one copy."""
        first = parts[0].values
        xp = np if isinstance(first, np.ndarray) else _module_of(first)
        return EndedEpisodes(
            xp.concatenate([p.values.ravel() for p in parts]), xp.concatenate([p.ended.ravel() for p in parts])
        )

    def tolist(self) -> list:
        return self.get().tolist()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.get()
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return int(self.ended.sum())

    def __iter__(self):
        return iter(self.get())

    @property
    def size(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        where = "host" if self.on_host else "device"
        return f"EndedEpisodes({self.values.shape[0]} envs, on the {where})"


def _module_of(array: Any) -> Any:
    import cupy

    return cupy
