"""Choosing NumPy or CuPy without importing CuPy where no GPU is usable.

Importing CuPy on a machine without a driver can be slow or print warnings,
and a successful import says nothing about a usable device; so CuPy is only
imported when its package exists, and only trusted when
``cupy.cuda.is_available()`` says a device answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.devices import gpu_available  # its home: device detection (re-exported here)

__all__ = ["gpu_available", "get_xp", "array_module_of"]

_CPU_NAMES = {"cpu", "numpy", "np"}
_GPU_NAMES = {"gpu", "cuda", "cupy", "cp"}


def get_xp(device: str = "auto") -> Any:
    """The array module for ``device``: ``"cpu"``/``"numpy"``, ``"gpu"``/``"cupy"``/``"cuda"``,
    ``"cuda:K"`` or ``"auto"``.

    ``"auto"`` picks CuPy when `gpu_available`, else NumPy. Asking for the GPU
    where none is usable raises `RuntimeError` rather than silently using NumPy.
    ``"cuda:K"`` also makes GPU ``K`` CuPy's current device in the calling thread
    (so arrays created next land there); a ``K`` this process does not have raises
    `RuntimeError` instead of quietly using GPU 0.

    Example::

        xp = get_xp("auto")
        x = xp.zeros(8, dtype=xp.float32)
        xp = get_xp(replica.device)       # "cpu" -> numpy; "cuda:1" -> cupy, on GPU 1
    """
    name = str(device).strip().lower()
    index = None
    if name.startswith("cuda:"):
        from workbench.devices import DeviceError, cuda_index

        try:
            index = cuda_index(name)
        except DeviceError as exc:
            raise ValueError(str(exc)) from None
        name = "cuda"
    if name in _CPU_NAMES:
        return np
    if name == "auto":
        name = "gpu" if gpu_available() else "cpu"
        return get_xp(name)
    if name in _GPU_NAMES:
        if not gpu_available():
            raise RuntimeError(
                f"device {device!r} asks for a GPU, but none is usable here "
                "(CuPy missing or cupy.cuda.is_available() is False); "
                "use device='cpu' or 'auto', or install cupy-cuda12x on a GPU machine"
            )
        import cupy

        if index is not None:
            _select_cupy_device(cupy, index, device)
        return cupy
    raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda:K', 'gpu' or 'auto'")


def _select_cupy_device(cupy: Any, index: int, device: str) -> None:
    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise RuntimeError(
            f"device {device!r} does not exist here: CuPy sees {count} GPU"
            f"{'s' if count != 1 else ''} (cuda:0 … cuda:{count - 1}; CUDA_VISIBLE_DEVICES renumbers them)"
        )
    # per thread: a replica's loop thread keeps its own current device
    cupy.cuda.Device(index).use()


def array_module_of(array: Any) -> Any:
    """``cupy`` for a CuPy array, else ``numpy`` — without importing CuPy for NumPy input."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np
