"""Array kernels for RL (NumPy, CuPy, torch): GAE, array-module choice, zero-copy interop.

Importing this package imports neither CuPy nor torch; they load on first use.
``workbench.kernels.cuda_graphs`` (CUDA graphs any algorithm captures) imports torch, so it is
imported by name, not from here.
"""

from workbench.kernels.array_module import array_module_of, get_xp, gpu_available
from workbench.kernels.gae import gae, normalize_advantages
from workbench.kernels.interop import from_torch, to_torch

__all__ = [
    "array_module_of",
    "from_torch",
    "gae",
    "get_xp",
    "gpu_available",
    "normalize_advantages",
    "to_torch",
]
