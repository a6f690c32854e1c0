"""Every GAE implementation against a plain-Python double loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.kernels import (
    from_torch,
    gae,
    get_xp,
    gpu_available,
    normalize_advantages,
    to_torch,
)
from workbench.kernels.gae import gae_numpy, gae_torch

GAMMA, LAM = 0.99, 0.95


def reference_gae(rewards, values, dones, last_value, last_done, gamma, lam):
    """CleanRL ppo.py's loop, one env at a time, in Python floats."""
    T, N = len(rewards), len(rewards[0])
    advantages = [[0.0] * N for _ in range(T)]
    for n in range(N):
        last_gae = 0.0
        for t in reversed(range(T)):
            if t == T - 1:
                next_nonterminal, next_value = 1.0 - float(last_done[n]), float(last_value[n])
            else:
                next_nonterminal, next_value = 1.0 - float(dones[t + 1][n]), float(values[t + 1][n])
            value = float(values[t][n])
            delta = float(rewards[t][n]) + gamma * next_value * next_nonterminal - value
            last_gae = delta + gamma * lam * next_nonterminal * last_gae
            advantages[t][n] = last_gae
    advantages = np.array(advantages)
    return advantages, advantages + np.asarray(values, dtype=np.float64)


def random_rollout(T=64, N=9, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(T, N)).astype(dtype),
        rng.normal(size=(T, N)).astype(dtype),
        rng.random((T, N)) < 0.1,  # bool dones, ~10% episode starts
        rng.normal(size=N).astype(dtype),
        rng.random(N) < 0.3,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_matches_reference(seed):
    rollout = random_rollout(seed=seed)
    expected = reference_gae(*rollout, GAMMA, LAM)
    got = gae(*rollout, GAMMA, LAM)
    assert got[0].dtype == np.float32 and got[0].shape == (64, 9)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_numpy_float64_is_exact_to_rounding():
    rollout = random_rollout(seed=3, dtype=np.float64)
    expected = reference_gae(*rollout, GAMMA, LAM)
    for g, e in zip(gae_numpy(*rollout, GAMMA, LAM), expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_done_cuts_bootstrapping():
    # One env, reward 1 each step, values 0: an episode start at t=2 cuts the sum.
    rewards = np.ones((4, 1), np.float32)
    values = np.zeros((4, 1), np.float32)
    dones = np.array([[0], [0], [1], [0]], np.float32)
    advantages, _ = gae(rewards, values, dones, np.zeros(1), np.ones(1), gamma=1.0, lam=1.0)
    np.testing.assert_allclose(advantages[:, 0], [2, 1, 2, 1])


def test_torch_matches_reference():
    rollout = random_rollout(seed=4)
    expected = reference_gae(*rollout, GAMMA, LAM)
    tensors = [torch.as_tensor(a) for a in rollout]
    got = gae(*tensors, GAMMA, LAM)
    assert isinstance(got[0], torch.Tensor) and got[0].dtype == torch.float32
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-4, atol=1e-4)


def test_torch_builds_no_graph():
    rewards, values, dones, last_value, last_done = (torch.as_tensor(a) for a in random_rollout())
    values.requires_grad_(True)
    advantages, returns = gae_torch(rewards, values, dones, last_value, last_done, GAMMA, LAM)
    assert not advantages.requires_grad and not returns.requires_grad


def test_shape_errors_are_clear():
    rewards, values, dones, last_value, last_done = random_rollout(T=5, N=3)
    with pytest.raises(ValueError, match=r"last_value must have shape \(3,\)"):
        gae(rewards, values, dones, np.zeros(4), last_done, GAMMA, LAM)
    with pytest.raises(ValueError, match=r"\[T, N\]"):
        gae(rewards[0], values, dones, last_value, last_done, GAMMA, LAM)


def test_normalize_advantages():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=1000).astype(np.float32)
    y = normalize_advantages(x)
    assert abs(y.mean()) < 1e-5 and abs(y.std(ddof=1) - 1.0) < 1e-4
    y_torch = normalize_advantages(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(y_torch, y, rtol=1e-5, atol=1e-6)


def test_torch_interop_is_zero_copy_on_cpu():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = to_torch(a)
    t[0, 0] = 42.0
    assert a[0, 0] == 42.0
    back = from_torch(t * 1 + 0)
    assert isinstance(back, np.ndarray)
    shared = from_torch(t)
    shared[1, 1] = -1.0
    assert t[1, 1].item() == -1.0
    with pytest.raises(TypeError, match="NumPy or CuPy"):
        to_torch([1, 2])


def test_array_module_helpers_without_gpu():
    assert get_xp("cpu") is np
    assert isinstance(gpu_available(), bool)
    assert gpu_available() is gpu_available()  # cached
    if not gpu_available():
        assert get_xp("auto") is np
        with pytest.raises(RuntimeError, match="no(ne)? .*GPU|GPU, but none"):
            get_xp("gpu")
    with pytest.raises(ValueError, match="unknown device"):
        get_xp("tpu")


# -- GPU variants: compared against the same reference ------------------------------


def _cupy():
    if not gpu_available():
        pytest.skip("no usable CUDA GPU with CuPy")
    import cupy

    return cupy


@pytest.mark.gpu
def test_cupy_kernel_matches_reference():
    cupy = _cupy()
    rollout = random_rollout(T=128, N=1000, seed=5)
    expected = reference_gae(*rollout, GAMMA, LAM)
    got = gae(*(cupy.asarray(a) for a in rollout), GAMMA, LAM)
    assert isinstance(got[0], cupy.ndarray)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_cupy_kernel_matches_numpy_twin():
    cupy = _cupy()
    rollout = random_rollout(T=256, N=4099, seed=6)
    on_gpu = gae(*(cupy.asarray(a) for a in rollout), GAMMA, LAM)
    for g, e in zip(on_gpu, gae(*rollout, GAMMA, LAM)):
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_torch_cuda_matches_reference_and_dlpack_round_trip():
    cupy = _cupy()
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    rollout = random_rollout(seed=7)
    expected = reference_gae(*rollout, GAMMA, LAM)
    got = gae(*(torch.as_tensor(a, device="cuda") for a in rollout), GAMMA, LAM)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.cpu().numpy(), e, rtol=1e-4, atol=1e-4)
    a = cupy.arange(6, dtype=cupy.float32)
    t = to_torch(a)
    t[0] = 42.0
    assert float(a[0]) == 42.0 and isinstance(from_torch(t), cupy.ndarray)


# -- the CUDA kernel's launch, pinned on the CPU ------------------------------------------
def test_gae_kernel_launch_skips_empty_rollouts_and_refuses_int32_overflow():
    from workbench.kernels.gae import _GAE_CUDA_SOURCE, _launch_config

    assert _launch_config(16, 0) is None and _launch_config(0, 16) is None  # no zero-size grid
    assert _launch_config(16, 129) == ((2,), (128,))
    with pytest.raises(ValueError, match="below 2\\*\\*31"):
        _launch_config(1, 2**31)
    # T * N past 2**31 (e.g. T=4096, N=2**20) indexes with 64 bits
    assert "const long long i = (long long)t * N + n;" in _GAE_CUDA_SOURCE
    assert "const int i" not in _GAE_CUDA_SOURCE


def test_gae_with_no_envs_is_empty_on_the_cpu_backends():
    import torch

    adv, ret = gae_numpy(np.zeros((4, 0)), np.zeros((4, 0)), np.zeros((4, 0)), np.zeros(0), np.zeros(0), 0.99, 0.95)
    assert adv.shape == ret.shape == (4, 0)
    z = torch.zeros(4, 0)
    adv, ret = gae_torch(z, z, z, torch.zeros(0), torch.zeros(0), 0.99, 0.95)
    assert tuple(adv.shape) == (4, 0)
