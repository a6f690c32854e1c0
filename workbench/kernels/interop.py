"""Zero-copy hand-off between env arrays (NumPy/CuPy) and torch tensors.

NumPy <-> CPU tensors share memory through ``torch.from_numpy``/``.numpy()``;
CuPy <-> CUDA tensors through DLPack. Nothing is copied, so a write on one side
is visible on the other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["to_torch", "from_torch"]


def to_torch(array: Any) -> Any:
    """A torch tensor sharing ``array``'s memory (NumPy -> CPU, CuPy -> CUDA).

    Example::

        obs_t = to_torch(env.step(actions)[0])     # no copy
    """
    import torch

    if type(array).__module__.startswith("cupy"):
        return torch.from_dlpack(array)
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    raise TypeError(f"to_torch expects a NumPy or CuPy array, got {type(array).__name__}")


def from_torch(tensor: Any) -> Any:
    """The array sharing ``tensor``'s memory: NumPy for CPU tensors, CuPy for CUDA ones.

    The tensor is detached first (an array cannot carry autograd history).

    Example::

        actions = from_torch(policy(obs_t).sample())   # feeds env.step, no copy
    """
    tensor = tensor.detach()
    if tensor.device.type == "cuda":
        import cupy

        return cupy.from_dlpack(tensor)
    if tensor.device.type != "cpu":
        raise TypeError(f"from_torch supports CPU and CUDA tensors, got device {tensor.device}")
    return tensor.numpy()
