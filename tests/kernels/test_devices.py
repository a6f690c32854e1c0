"""Device strings: one parser, ``replica.device`` always ``"cpu"`` or ``"cuda:K"``, and
``get_xp("cuda:K")`` never silently on GPU 0. Pinned on the CPU (GPUs are faked by count)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.context import ReplicaInfo
from workbench.devices import DeviceError, claim_gpus, cuda_index, normalize_device, parse_device, replica_device
from workbench.kernels import get_xp, gpu_available


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: this process pretends its worker offers ``n`` GPUs."""
    monkeypatch.setattr("workbench.devices._claimed", None)
    return claim_gpus


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("cpu", ("cpu", None)),
        ("CPU", ("cpu", None)),
        ("cuda", ("cuda", 0)),
        ("gpu", ("cuda", 0)),
        ("cuda:0", ("cuda", 0)),
        ("cuda:3", ("cuda", 3)),
        (" cuda:12 ", ("cuda", 12)),
    ],
)
def test_parse(text, parsed):
    assert parse_device(text) == parsed


@pytest.mark.parametrize("bad", ["tpu", "cuda:", "cuda:-1", "cuda:x", "gpu:1", "", "cuda 1"])
def test_bad_device_strings_are_refused(bad):
    with pytest.raises(DeviceError, match="use 'cpu' or 'cuda:K'"):
        parse_device(bad)


def test_normalized_strings_are_what_torch_accepts():
    import torch

    for text in ("cpu", "cuda", "gpu", "cuda:2"):
        canonical = normalize_device(text)
        assert canonical in ("cpu", "cuda:0", "cuda:2")
        torch.device(canonical)  # raises for "gpu"; never for these
    assert cuda_index("cuda:2") == 2 and cuda_index("cpu") is None


def test_a_gpu_placement_becomes_cuda_k_spread_over_the_workers_gpus(gpus):
    gpus(2)
    assert [ReplicaInfo("learner", i, 4, "w0", "gpu").device for i in range(4)] == [
        "cuda:0",
        "cuda:1",
        "cuda:0",
        "cuda:1",
    ]
    assert ReplicaInfo("learner", 0, 1, "w0", "cuda:1").device == "cuda:1"
    assert ReplicaInfo("learner", 0, 1, "w0", "cpu").device == "cpu"
    assert replica_device("gpu", 5, gpus=4) == "cuda:1"


def test_replica_device_is_never_the_word_gpu(gpus):
    gpus(1)
    assert ReplicaInfo("env", 0, 1, "w0", "gpu").device == "cuda:0"


def test_a_gpu_placement_without_a_gpu_is_an_error_not_the_cpu(gpus):
    gpus(0)
    with pytest.raises(DeviceError, match="no CUDA device answers"):
        ReplicaInfo("learner", 0, 1, "w0", "gpu")
    gpus(1)
    with pytest.raises(DeviceError, match="sees 1 GPU"):
        ReplicaInfo("learner", 0, 1, "w0", "cuda:1")


def test_a_host_without_a_gpu_driver_counts_no_gpu_without_importing_torch():
    """What a fresh ``dask worker``'s GPU plugin asks first: on a CPU host the answer is 0
    and torch stays unimported (its import cost every worker 2.6 s here for that 0)."""
    import subprocess
    import sys

    from workbench.devices import gpu_driver_present

    if gpu_driver_present():
        pytest.skip("this host has a GPU driver: torch is asked")
    probe = "import sys; from workbench.devices import visible_gpus; print(visible_gpus(), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["0", "False"], done.stdout + done.stderr[-2000:]


def test_a_replica_on_the_cpu_needs_no_gpu_probe(monkeypatch):
    def boom():
        raise AssertionError("probed for GPUs")

    monkeypatch.setattr("workbench.devices.visible_gpus", boom)
    assert ReplicaInfo("actor").device == "cpu"


def test_activating_a_cpu_replica_selects_nothing(monkeypatch):
    from workbench import context

    monkeypatch.setattr("workbench.devices.use_device", lambda d: pytest.fail("selected a device"))
    token = context.activate(context.ReplicaContext(ReplicaInfo("actor")))
    context.deactivate(token)


def test_activating_a_gpu_replica_selects_its_device_in_the_thread(gpus, monkeypatch):
    from workbench import context

    gpus(2)
    chosen = []
    monkeypatch.setattr("workbench.devices.use_device", chosen.append)
    token = context.activate(context.ReplicaContext(ReplicaInfo("learner", 1, 2, "w0", "gpu")))
    context.deactivate(token)
    assert chosen == ["cuda:1"]


def test_use_device_on_cpu_is_a_no_op():
    from workbench.devices import use_device

    use_device("cpu")


def test_get_xp_cuda_k():
    assert get_xp("cpu") is np
    with pytest.raises(ValueError, match="use 'cpu' or 'cuda:K'"):
        get_xp("cuda:x")
    if not gpu_available():
        with pytest.raises(RuntimeError, match="none is usable"):
            get_xp("cuda:1")


class _FakeRuntime:
    @staticmethod
    def getDeviceCount():
        return 1


class _FakeCupy:
    """Records which device get_xp makes current."""

    used: list = []

    class cuda:
        runtime = _FakeRuntime

        class Device:
            def __init__(self, index):
                self.index = index

            def use(self):
                _FakeCupy.used.append(self.index)


def test_get_xp_selects_device_k_or_refuses(monkeypatch):
    from workbench.kernels import array_module

    _FakeCupy.used = []
    array_module._select_cupy_device(_FakeCupy, 0, "cuda:0")
    assert _FakeCupy.used == [0]
    with pytest.raises(RuntimeError, match=r"'cuda:1' does not exist here: CuPy sees 1 GPU"):
        array_module._select_cupy_device(_FakeCupy, 1, "cuda:1")
    assert _FakeCupy.used == [0]  # not silently device 0
