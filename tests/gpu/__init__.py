"""GPU tests and their CPU twins. ``ON_GPU`` marks a module's tests as needing a usable CUDA
GPU with CuPy and torch (``pytestmark = ON_GPU``): they carry the ``gpu`` marker and skip,
saying why, where there is none — which is every CI run."""
from __future__ import annotations

import pytest


def cuda_usable() -> bool:
    """A GPU that both CuPy and torch can use."""
    try:
        import torch

        from workbench.kernels import gpu_available

        return gpu_available() and torch.cuda.is_available()
    except Exception:  # noqa: BLE001  (a broken driver or install: no GPU to test on)
        return False


ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="needs CUDA with CuPy and torch")]
