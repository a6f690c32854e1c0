"""GPU tests and their CPU twins. ``ON_GPU`` marks a module's tests as needing a usable CUDA
GPU with CuPy and torch (``pytestmark = ON_GPU``; ``ON_TORCH_GPU``: torch alone): they carry
the ``gpu`` marker and skip, saying why, where there is none — which is every CI run."""

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


def torch_cuda_usable() -> bool:
    """A GPU torch can use (the language-model tests need no CuPy)."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="needs CUDA with CuPy and torch")]
#: for tests of torch alone on the GPU (GRPO): they run on a GPU host without CuPy too
ON_TORCH_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch_cuda_usable(), reason="needs CUDA with torch")]
