"""Generalised Advantage Estimation over ``[T, N]`` rollouts: NumPy, CuPy, torch.

One function, `gae`, dispatches on the type of ``rewards``: a NumPy array runs
the NumPy loop, a CuPy array the CUDA kernel (one thread per env), a torch
tensor the torch loop (on the tensor's device). All follow CleanRL's ``ppo.py``.

The ``dones`` convention (CleanRL's ``next_done``)
-------------------------------------------------
``dones[t]`` is stored NEXT TO ``obs[t]``: it is 1 when ``obs[t]`` is the first
observation of a new episode, i.e. when the env step taken at ``t - 1``
returned ``terminated | truncated``. ``last_done`` is the done flag returned by
the final step ``T - 1`` (it belongs to ``last_value``'s observation). So the
transition ``t`` bootstraps from ``values[t + 1]`` unless ``dones[t + 1]``, and
transition ``T - 1`` from ``last_value`` unless ``last_done``. In a loop::

    next_obs, next_done = env.reset(), zeros(N)
    for t in range(T):
        obs[t], dones[t] = next_obs, next_done        # dones[t] describes obs[t]
        action, values[t] = policy(obs[t])
        next_obs, rewards[t], term, trunc, _ = env.step(action)
        next_done = term | trunc
    last_value, last_done = V(next_obs), next_done
    advantages, returns = gae(rewards, values, dones, last_value, last_done, 0.99, 0.95)

A ``done`` returned by step ``t`` therefore lands in ``dones[t + 1]`` (or
``last_done``), NOT in ``dones[t]``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["gae", "gae_numpy", "gae_cupy", "gae_torch", "normalize_advantages"]


def gae(
    rewards: Any,
    values: Any,
    dones: Any,
    last_value: Any,
    last_done: Any,
    gamma: float,
    lam: float,
) -> tuple[Any, Any]:
    """Advantages and returns (``advantages + values``), both ``[T, N]``.

    Args:
        rewards, values, dones: ``[T, N]``; ``dones`` as described in the module
            docstring (1 where ``obs[t]`` starts a new episode), bool or float.
        last_value: ``[N]`` value of the observation after the last step.
        last_done: ``[N]`` done flag returned by the last step.
        gamma: discount; lam: GAE lambda.

    Example::

        adv, ret = gae(rewards, values, dones, last_value, last_done, gamma=0.99, lam=0.95)
    """
    kind = type(rewards).__module__
    if kind.startswith("torch"):
        return gae_torch(rewards, values, dones, last_value, last_done, gamma, lam)
    if kind.startswith("cupy"):
        return gae_cupy(rewards, values, dones, last_value, last_done, gamma, lam)
    return gae_numpy(rewards, values, dones, last_value, last_done, gamma, lam)


def gae_numpy(rewards, values, dones, last_value, last_done, gamma, lam):
    """`gae` for NumPy arrays: vectorised over envs, a loop over time only."""
    rewards, values = np.asarray(rewards), np.asarray(values)
    dtype = np.result_type(rewards.dtype, values.dtype, np.float32)
    _check_shapes(rewards, values, dones, last_value, last_done)
    advantages = np.empty(rewards.shape, dtype=dtype)
    dones = np.asarray(dones, dtype=dtype)
    # what follows each step, for all steps at once: only the recursion itself loops (two
    # ops a step instead of eight; the same operations in the same order, so the same bits)
    next_nonterminal = np.concatenate([1.0 - dones[1:], (1.0 - np.asarray(last_done, dtype=dtype))[None]])
    next_values = np.concatenate([values[1:], np.asarray(last_value, dtype=dtype)[None]])
    delta = rewards + gamma * next_values * next_nonterminal - values
    decay = gamma * lam * next_nonterminal
    last_gae = np.zeros(rewards.shape[1], dtype=dtype)
    for t in reversed(range(rewards.shape[0])):
        last_gae = delta[t] + decay[t] * last_gae
        advantages[t] = last_gae
    return advantages, advantages + values


_GAE_CUDA_SOURCE = r"""
extern "C" __global__
void gae_kernel(const float* rewards, const float* values, const float* dones,
                const float* last_value, const float* last_done,
                const float gamma, const float lam, const int T, const int N,
                float* advantages, float* returns) {
    // One thread per env walks time backwards; neighbouring threads read
    // neighbouring columns of a [T, N] row, so loads coalesce.
    const int n = blockDim.x * blockIdx.x + threadIdx.x;
    if (n >= N) return;
    // 64-bit flat index: t * N passes 2^31 for rollouts over ~2G elements
    float next_value = last_value[n];
    float next_nonterminal = 1.0f - last_done[n];
    float last_gae = 0.0f;
    for (int t = T - 1; t >= 0; --t) {
        const long long i = (long long)t * N + n;
        const float v = values[i];
        const float delta = rewards[i] + gamma * next_value * next_nonterminal - v;
        last_gae = delta + gamma * lam * next_nonterminal * last_gae;
        advantages[i] = last_gae;
        returns[i] = last_gae + v;
        next_value = v;
        next_nonterminal = 1.0f - dones[i];
    }
}
"""


@functools.cache
def _gae_kernel() -> Any:
    import cupy

    return cupy.RawKernel(_GAE_CUDA_SOURCE, "gae_kernel")


def gae_cupy(rewards, values, dones, last_value, last_done, gamma, lam):
    """`gae` for CuPy arrays: a CUDA kernel with one thread per env (float32)."""
    import cupy

    def f32(a: Any) -> Any:
        return cupy.ascontiguousarray(cupy.asarray(a, dtype=cupy.float32))

    rewards, values, dones = f32(rewards), f32(values), f32(dones)
    last_value, last_done = f32(last_value), f32(last_done)
    _check_shapes(rewards, values, dones, last_value, last_done)
    T, N = rewards.shape
    advantages = cupy.empty_like(rewards)
    returns = cupy.empty_like(rewards)
    launch = _launch_config(T, N)
    if launch is None:  # nothing to compute (a zero-size grid is an invalid launch)
        return advantages, returns
    _gae_kernel()(
        *launch,
        (
            rewards,
            values,
            dones,
            last_value,
            last_done,
            np.float32(gamma),
            np.float32(lam),
            np.int32(T),
            np.int32(N),
            advantages,
            returns,
        ),
    )
    return advantages, returns


#: threads per block of the GAE kernel
_THREADS = 128
_INT32_MAX = 2**31 - 1


def _launch_config(T: int, N: int) -> tuple[tuple[int], tuple[int]] | None:
    """(grid, block) for the GAE kernel over ``[T, N]``; None when there is nothing to do.

    The kernel takes ``T`` and ``N`` as int32 (its flat index is 64-bit), so each must fit.

    >>> _launch_config(128, 1000)
    ((8,), (128,))
    >>> _launch_config(128, 0) is None
    True
    """
    if T == 0 or N == 0:
        return None
    if T > _INT32_MAX or N > _INT32_MAX:
        raise ValueError(f"gae on CuPy takes T and N below 2**31, got T={T}, N={N}: split the rollout")
    return ((N + _THREADS - 1) // _THREADS,), (_THREADS,)


def gae_torch(rewards, values, dones, last_value, last_done, gamma, lam):
    """`gae` for torch tensors on any device (no autograd graph is built)."""
    import torch

    with torch.no_grad():
        _check_shapes(rewards, values, dones, last_value, last_done)
        dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
        values = values.to(dtype)
        dones = dones.to(dtype)
        advantages = torch.empty_like(values)
        next_nonterminal = 1.0 - torch.as_tensor(last_done, device=values.device).to(dtype)
        next_values = torch.as_tensor(last_value, device=values.device).to(dtype)
        last_gae = torch.zeros_like(values[0])
        for t in reversed(range(rewards.shape[0])):
            delta = rewards[t] + gamma * next_values * next_nonterminal - values[t]
            last_gae = delta + gamma * lam * next_nonterminal * last_gae
            advantages[t] = last_gae
            next_nonterminal, next_values = 1.0 - dones[t], values[t]
        return advantages, advantages + values


def normalize_advantages(x: Any, eps: float = 1e-8) -> Any:
    """``(x - mean) / (std + eps)`` with the sample std (ddof=1), as CleanRL's PPO.

    Works on NumPy, CuPy and torch alike (a single element gives NaN, as torch).

    Example::

        mb_advantages = normalize_advantages(advantages[mb_inds])
    """
    if type(x).__module__.startswith("torch"):
        return (x - x.mean()) / (x.std() + eps)
    return (x - x.mean()) / (x.std(ddof=1) + eps)


def _check_shapes(rewards, values, dones, last_value, last_done) -> None:
    if len(rewards.shape) != 2:
        raise ValueError(f"gae expects rewards of shape [T, N], got {tuple(rewards.shape)}")
    T, N = rewards.shape
    for name, array, shape in (
        ("values", values, (T, N)),
        ("dones", dones, (T, N)),
        ("last_value", last_value, (N,)),
        ("last_done", last_done, (N,)),
    ):
        got = tuple(array.shape) if hasattr(array, "shape") else np.shape(array)
        if got != shape:
            raise ValueError(f"gae: {name} must have shape {shape} to match rewards [T={T}, N={N}], got {got}")
