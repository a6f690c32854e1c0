"""Device strings a replica can run on, and choosing that device in a thread.

A placement says ``"cpu"`` or ``"gpu"`` (the policy's words: a kind of slot on a
worker); a running replica gets a concrete device string that torch and CuPy both
accept: ``"cpu"`` or ``"cuda:K"``. This module is the one place that parses,
validates and resolves them (the pure ``workbench.fdg`` layer does not need it).

Example:
    >>> parse_device("cuda:1")
    ('cuda', 1)
    >>> normalize_device("CUDA")
    'cuda:0'
    >>> replica_device("cpu", index=3)
    'cpu'
    >>> replica_device("gpu", index=3, gpus=2)
    'cuda:1'
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

from workbench.loaded_modules import loaded

__all__ = [
    "DeviceError",
    "parse_device",
    "normalize_device",
    "cuda_index",
    "replica_device",
    "visible_gpus",
    "gpu_driver_present",
    "gpus_here",
    "claim_gpus",
    "use_device",
]


class DeviceError(ValueError):
    """A device string that is malformed, or names a GPU this process does not have."""


#: GPUs this process was given by the worker's GPU plugin (``workbench.cluster.gpus``);
#: None: not told, so ask CUDA (:func:`visible_gpus`).
_claimed: int | None = None


def parse_device(device: str) -> tuple[str, int | None]:
    """``("cpu", None)`` or ``("cuda", K)`` for a device string; anything else raises
    :class:`DeviceError`. Accepts ``cpu``, ``cuda``, ``cuda:K`` and the placement word
    ``gpu`` (both mean GPU 0 here; a replica's GPU comes from :func:`replica_device`).

    >>> parse_device("cpu"), parse_device("gpu")
    (('cpu', None), ('cuda', 0))
    """
    text = str(device).strip().lower()
    if text == "cpu":
        return "cpu", None
    if text in ("cuda", "gpu"):
        return "cuda", 0
    if text.startswith("cuda:"):
        number = text[5:]
        if number.isdigit():
            return "cuda", int(number)
    raise DeviceError(f"unknown device {device!r}: use 'cpu' or 'cuda:K' (K = 0, 1, … the GPU's index in this process)")


def normalize_device(device: str) -> str:
    """The canonical spelling: ``"cpu"`` or ``"cuda:K"`` (valid for torch and CuPy).

    >>> normalize_device("cuda:02")
    'cuda:2'
    """
    kind, index = parse_device(device)
    return "cpu" if kind == "cpu" else f"cuda:{index}"


def cuda_index(device: str) -> int | None:
    """``K`` of ``"cuda:K"``; None for the CPU.

    >>> cuda_index("cuda:3"), cuda_index("cpu")
    (3, None)
    """
    return parse_device(device)[1]


#: what a GPU driver puts in the file system on Linux: NVIDIA's control device, its first
#: GPU and its procfs folder; AMD ROCm's (torch.cuda counts ROCm's GPUs); WSL2's
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def gpu_driver_present(exists=os.path.exists, platform: str = sys.platform) -> bool:
    """Whether a GPU driver could give this process a CUDA device: on Linux, whether one of
    :data:`GPU_DRIVER_NODES` exists; elsewhere assumed (torch is asked).

    >>> gpu_driver_present(exists=lambda path: False, platform="linux")
    False
    >>> gpu_driver_present(exists=lambda path: path == "/dev/nvidiactl", platform="linux")
    True
    >>> gpu_driver_present(exists=lambda path: False, platform="darwin")
    True
    """
    if not platform.startswith("linux"):
        return True
    return any(exists(path) for path in GPU_DRIVER_NODES)


def visible_gpus() -> int:
    """CUDA devices this process can use (honours ``CUDA_VISIBLE_DEVICES``); 0 when there
    is no driver, no GPU, or neither torch nor CuPy is installed. Never raises.

    On Linux without a GPU driver (:func:`gpu_driver_present`) the answer is 0 at once.
    Otherwise torch is asked first (its count reads NVML and does not create a CUDA context); CuPy
    only where it is installed, and only through its runtime call (see
    ``workbench.kernels.array_module``: a successful import proves nothing).
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    if loaded("torch") is None and not gpu_driver_present():
        # no driver: CUDA sees nothing, and asking torch would import it (~2.5 s) for that
        # 0, in every `dask worker` a user starts on a CPU host (the GPU plugin asks here)
        return 0
    try:
        if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
            import torch

            return int(torch.cuda.device_count())
    except Exception:  # a broken CUDA install is "no GPU" here, not a crash
        pass
    try:
        if gpu_available():
            import cupy

            return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        pass
    return 0


def claim_gpus(count: int | None) -> None:
    """Record how many GPUs this process's worker offers (called by the GPU plugin), so a
    replica placed on ``gpu`` is given one of those; None forgets the claim."""
    global _claimed
    _claimed = None if count is None else max(0, int(count))


def gpus_here() -> int:
    """GPUs replicas in this process may use: the worker's claim, else :func:`visible_gpus`."""
    return _claimed if _claimed is not None else visible_gpus()


def replica_device(placement: str, index: int = 0, *, gpus: int | None = None) -> str:
    """The concrete device of replica ``index`` of a group placed on ``placement``.

    ``"cpu"`` stays ``"cpu"``; ``"gpu"`` becomes ``"cuda:K"`` with ``K = index % gpus``
    (``gpus`` defaults to :func:`gpus_here`), so replicas sharing a multi-GPU worker spread
    over its GPUs; ``"cuda:K"`` is kept (validated). A GPU placement where no GPU answers
    raises :class:`DeviceError` instead of running on the CPU unnoticed.

    >>> replica_device("cuda:1", 0, gpus=2)
    'cuda:1'
    """
    kind, number = parse_device(placement)
    if kind == "cpu":
        return "cpu"
    count = gpus_here() if gpus is None else gpus
    if count <= 0:
        raise DeviceError(
            f"this replica is placed on a GPU ({placement!r}), but no CUDA device answers in this "
            "process (torch.cuda.device_count() is 0 and CuPy sees none). Place it on 'cpu', or "
            "run it on a worker whose GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)."
        )
    if str(placement).strip().lower() == "gpu":
        return f"cuda:{index % count}"
    if number >= count:
        raise DeviceError(
            f"device {placement!r} does not exist here: this process sees {count} "
            f"GPU{'s' if count != 1 else ''} (cuda:0 … cuda:{count - 1})."
        )
    return f"cuda:{number}"


def use_device(device: str) -> None:
    """Make ``device`` the current CUDA device of the calling thread, for torch and for
    CuPy (each keeps its own per-thread current device); a no-op for ``"cpu"``. Libraries
    not loaded yet are left alone (they start on the thread's CUDA device anyway).

    Example::

        use_device(replica.device)     # then cupy.zeros(…) and torch.zeros(…, device="cuda") land there
    """
    index = cuda_index(device)
    if index is None:
        return
    torch = loaded("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.set_device(index)
    if "cupy" in sys.modules:
        if gpu_available():
            import cupy

            cupy.cuda.Device(index).use()


@functools.cache
def gpu_available() -> bool:
    """Whether CuPy is installed AND a CUDA device is usable. Cached; never raises.

    Example::

        xp = cupy if gpu_available() else numpy
    """
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import warnings

        with warnings.catch_warnings():
            # CuPy warns at import on some driver/toolkit mismatches; the
            # answer below is what matters, not the warning.
            warnings.simplefilter("ignore")
            import cupy

            return bool(cupy.cuda.is_available())
    except Exception:  # any failure means: no usable GPU here
        return False
