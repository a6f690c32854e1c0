"""A counter-based random generator for GPU envs: every draw is a pure function of integers.

A reset on the device must not ask the host for random numbers (that is a copy and a wait
every step). Here the ``d``-th uniform of env ``i``'s ``e``-th episode is splitmix64 (Steele,
Lea, Flood 2014) of the seed's key, ``i``, ``e`` and ``d``: no generator state to carry, so
an env's random stream is its episode counters (arrays that pickle and checkpoint), and any
backend computes the same bits: the integer mixing wraps the same on NumPy and CUDA, and a
53-bit integer times 2**-53 is exact in float64.

`FusedCartPole` draws its start states this way inside its CUDA kernel; `SimpleSpread`'s
``resets="counter"`` calls `uniforms` (one elementwise kernel on CuPy).

Example:
    >>> import numpy as np
    >>> key = seed_key(1)
    >>> u = uniforms(key, np.arange(3), np.zeros(3, np.uint32), 4)
    >>> u.shape, bool(((u >= 0) & (u < 1)).all())
    ((3, 4), True)
    >>> bool((uniforms(key, np.arange(3), np.ones(3, np.uint32), 4) != u).all())  # next episode
    True
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["seed_key", "uniforms", "MIX1", "MIX2", "ENV", "EPISODE", "DRAW"]

# splitmix64's finaliser multipliers, and the odd constants that spread the env index, the
# episode number and the draw index over 64 bits
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
ENV, EPISODE, DRAW = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03, 0xABC98388FB8FAC03


def mix(z: Any) -> Any:
    """splitmix64's finaliser on uint64 arrays of any array module (wrapping, as in C)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def seed_key(seed: int) -> int:
    """The 64-bit key a seed becomes (any int; negative ones wrap).

    >>> seed_key(0) != seed_key(1)
    True
    """
    return int(mix(np.array([seed & (2**64 - 1)], np.uint64))[0])


@functools.cache
def _draw_steps(draws: int, xp: Any = np, device: int | None = None) -> Any:
    """``(d + 1) * DRAW`` for each draw ``d`` (wrapped as in C, without NumPy's scalar overflow
    warning), as an ``xp`` array: made once per module, GPU and count, since `uniforms` runs
    every step of a GPU env and a fresh host-to-device copy each time would be waste."""
    steps = np.array([(d + 1) * DRAW % 2**64 for d in range(draws)], np.uint64)
    steps.setflags(write=False)  # shared by every call
    return steps if xp is np else xp.asarray(steps)


def uniforms(key: int, envs: Any, episodes: Any, draws: int, xp: Any = np) -> Any:
    """Uniforms in ``[0, 1)``, ``[len(envs), draws]`` float64: draw ``d`` of each env's
    episode ``episodes[k]``; the same bits on every array module.

    ``envs`` and ``episodes`` are arrays of ``xp`` (CuPy: one fused kernel; any other
    module: its array operations).

    >>> a = uniforms(seed_key(3), np.array([5]), np.array([2], np.uint32), 2)
    >>> b = uniforms(seed_key(3), np.arange(6), np.full(6, 2, np.uint32), 2)[5:]
    >>> bool((a == b).all())                    # env 5's draws do not depend on its neighbours
    True
    """
    envs, episodes = envs.astype(xp.uint64), episodes.astype(xp.uint64)
    if getattr(xp, "__name__", "") == "cupy":
        steps = _draw_steps(draws, xp, xp.cuda.Device().id)
        out = xp.empty((envs.shape[0], draws), xp.float64)
        return _cupy_kernel()(np.uint64(key), envs[:, None], episodes[:, None], steps[None, :], out)
    steps = xp.asarray(_draw_steps(draws))  # other modules: NumPy's array, as theirs
    z = mix(np.uint64(key) + envs * np.uint64(ENV))
    z = mix(z + episodes * np.uint64(EPISODE))
    bits = mix(z[:, None] + steps[None, :]) >> np.uint64(11)
    return bits.astype(xp.float64) * 2.0**-53


@functools.cache
def _cupy_kernel() -> Any:
    """`uniforms` as one CuPy elementwise kernel (the arithmetic above, in C)."""
    import cupy

    preamble = r"""
    __device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
        z = (z ^ (z >> 30)) * 0x%(mix1)xULL;
        z = (z ^ (z >> 27)) * 0x%(mix2)xULL;
        return z ^ (z >> 31);
    }""" % dict(mix1=MIX1, mix2=MIX2)
    body = """
    unsigned long long z = mix64(key + env * 0x%(env)xULL);
    z = mix64(z + episode * 0x%(episode)xULL);
    u = (double)(mix64(z + step) >> 11) * 0x1.0p-53;
    """ % dict(env=ENV, episode=EPISODE)
    return cupy.ElementwiseKernel(
        "uint64 key, uint64 env, uint64 episode, uint64 step",
        "float64 u",
        body,
        "workbench_counter_uniforms",
        preamble=preamble,
    )
