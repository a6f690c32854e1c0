"""CartPole-v1 for the GPU: one fused CUDA kernel steps, resets and draws the random numbers
of every env, so nothing crosses to the host per step. Its NumPy twin runs the same
arithmetic and the same random stream on the CPU (CI tests it; GPU tests compare the two).

Why not the array `CartPole` on CuPy: that one draws its resets on the host (gymnasium's
generator, so its NumPy version matches gymnasium bit for bit) and reads which envs ended
back every step, and it runs ~25 small CuPy kernels per step. Here a reset draws from a
counter-based generator (splitmix64 of the seed, the env index and the env's episode
number), so any env's next start state is a pure function of integers the device holds,
and the env's whole state is a few arrays of numbers (it pickles, deep-copies and
checkpoints like any array env).

Bit-compatibility of the twin: the random draws, the reset states and every step's
arithmetic (the kernel is compiled without fused multiply-adds, in gymnasium's order of
operations) are the same bits on both; only CUDA's ``sin``/``cos`` round differently from
the host's in the last bit, so trajectories agree to ~1e-15 per step and may part where a
pole crosses a threshold within that margin.

An out-of-range action (not 0 or 1) cannot raise inside a kernel: the kernel raises a flag
on the device, which `step` reads every ``check_every`` steps (one small copy, 32 steps by
default) and turns into the same ``ValueError`` the NumPy env raises at once.

Example:
    >>> import numpy as np
    >>> env = FusedCartPole(4, seed=0)          # the NumPy twin; xp=cupy for the kernel
    >>> obs = env.reset()
    >>> obs.shape, obs.dtype
    ((4, 4), dtype('float32'))
    >>> obs, reward, terminated, truncated, info = env.step(np.ones(4, np.int64))
    >>> info["episode_return"]
    EndedEpisodes(4 envs, on the host)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces

from workbench.envs.base import DISCRETE_KINDS, SavesState, StepResult, action_error
from workbench.envs.cartpole import (
    FORCE_MAG,
    GRAVITY,
    LENGTH,
    MASSPOLE,
    MAX_EPISODE_STEPS,
    POLEMASS_LENGTH,
    RESET_HIGH,
    RESET_LOW,
    TAU,
    THETA_THRESHOLD_RADIANS,
    TOTAL_MASS,
    X_THRESHOLD,
    CartPole,
)
from workbench.envs.counter_rng import DRAW, ENV, EPISODE, MIX1, MIX2, seed_key, uniforms
from workbench.envs.episodes import EndedEpisodes

__all__ = ["FusedCartPole", "reset_draws", "seed_key"]

_SPAN = RESET_HIGH - RESET_LOW
_THREADS = 256


def reset_draws(key: int, envs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
    """Start states ``[len(envs), 4]`` (float64, uniform in [-0.05, 0.05)) of ``envs`` for
    their episode numbers ``episodes``: what the kernel draws, bit for bit.

    >>> a = reset_draws(seed_key(1), np.arange(3), np.zeros(3))
    >>> b = reset_draws(seed_key(1), np.arange(3), np.zeros(3))
    >>> bool((a == b).all()), bool((abs(a) <= 0.05).all()), a.shape
    (True, True, (3, 4))
    """
    return RESET_LOW + _SPAN * uniforms(key, np.asarray(envs), np.asarray(episodes), 4)


def _f(x: float) -> str:
    """A double as a C literal that reads back to the same bits."""
    return repr(float(x))


_CUDA_SOURCE = r"""
#define MIX1 0x%(mix1)xULL
#define MIX2 0x%(mix2)xULL
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * MIX1;
    z = (z ^ (z >> 27)) * MIX2;
    return z ^ (z >> 31);
}
// the start state of env i's episode e: reset_draws() in Python, bit for bit
__device__ void draw_state(unsigned long long key, unsigned long long i, unsigned long long e,
                           double* s) {
    unsigned long long z = mix64(key + i * 0x%(env)xULL);
    z = mix64(z + e * 0x%(episode)xULL);
    for (int j = 0; j < 4; ++j) {
        unsigned long long r = mix64(z + (unsigned long long)(j + 1) * 0x%(draw)xULL) >> 11;
        s[j] = %(low)s + %(span)s * ((double)r * 0x1.0p-53);
    }
}
__device__ void put(double* state, float* obs, const double* s, int i, int n) {
    for (int k = 0; k < 4; ++k) { state[k * n + i] = s[k]; obs[i * 4 + k] = (float)s[k]; }
}
extern "C" __global__ void cartpole_reset(unsigned long long key, unsigned int* episodes,
        int advance, double* state, int* elapsed, float* obs, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= n) return;
    if (advance) episodes[i] += 1u;
    double s[4];
    draw_state(key, (unsigned long long)i, (unsigned long long)episodes[i], s);
    put(state, obs, s, i, n);
    elapsed[i] = 0;
}
extern "C" __global__ void cartpole_step(const long long* actions, double* state, int* elapsed,
        unsigned int* episodes, float* obs, float* final_obs, float* reward, bool* terminated,
        bool* truncated, float* ended_return, long long* ended_length, int* bad,
        unsigned long long key, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= n) return;
    long long a = actions[i];
    if (a != 0 && a != 1) { *bad = 1; a = 0; }
    double x = state[i], x_dot = state[n + i], theta = state[2 * n + i], theta_dot = state[3 * n + i];
    // gymnasium's expressions in gymnasium's order (compiled with --fmad=false)
    double force = a == 1 ? %(force)s : -%(force)s;
    double costheta = cos(theta), sintheta = sin(theta);
    double temp = (force + %(pml)s * (theta_dot * theta_dot) * sintheta) / %(total)s;
    double thetaacc = (%(gravity)s * sintheta - costheta * temp) /
        (%(length)s * (%(four_thirds)s - %(masspole)s * (costheta * costheta) / %(total)s));
    double xacc = temp - %(pml)s * thetaacc * costheta / %(total)s;
    double s[4] = {x + %(tau)s * x_dot, x_dot + %(tau)s * xacc,
                   theta + %(tau)s * theta_dot, theta_dot + %(tau)s * thetaacc};
    bool term = fabs(s[0]) > %(x_limit)s || fabs(s[2]) > %(theta_limit)s;
    int steps = elapsed[i] + 1;
    bool trunc = steps >= %(max_steps)d;
    for (int k = 0; k < 4; ++k) final_obs[i * 4 + k] = (float)s[k];
    terminated[i] = term; truncated[i] = trunc; reward[i] = 1.0f;
    if (term || trunc) {
        ended_return[i] = (float)steps;   // reward 1 per step: the return is the length
        ended_length[i] = steps;
        unsigned int e = episodes[i] + 1u;
        episodes[i] = e;
        draw_state(key, (unsigned long long)i, (unsigned long long)e, s);
        steps = 0;
    } else {
        ended_return[i] = 0.0f;
        ended_length[i] = 0;
    }
    put(state, obs, s, i, n);
    elapsed[i] = steps;
}
""" % dict(
    mix1=MIX1,
    mix2=MIX2,
    env=ENV,
    episode=EPISODE,
    draw=DRAW,
    low=_f(RESET_LOW),
    span=_f(_SPAN),
    force=_f(FORCE_MAG),
    pml=_f(POLEMASS_LENGTH),
    total=_f(TOTAL_MASS),
    gravity=_f(GRAVITY),
    length=_f(LENGTH),
    four_thirds=_f(4.0 / 3.0),
    masspole=_f(MASSPOLE),
    tau=_f(TAU),
    x_limit=_f(X_THRESHOLD),
    theta_limit=_f(THETA_THRESHOLD_RADIANS),
    max_steps=MAX_EPISODE_STEPS,
)


@functools.cache
def _kernels(device: int) -> tuple[Any, Any]:
    """The compiled (reset, step) kernels for one GPU (CuPy caches the binary on disk)."""
    import cupy

    module = cupy.RawModule(code=_CUDA_SOURCE, options=("--fmad=false",))
    return module.get_function("cartpole_reset"), module.get_function("cartpole_step")


class FusedCartPole(SavesState):
    """``N`` CartPole-v1 envs: one CUDA kernel per step on CuPy, its NumPy twin on NumPy.

    Implements `workbench.envs.VectorEnv` with same-step autoreset; ``info``'s
    ``episode_return`` / ``episode_length`` are `EndedEpisodes` (on the env's device until
    read). ``make("CartPole-v1", N, backend="cuda:K")`` (or ``"cupy"``) gives this env.

    Args:
        num_envs: number of envs ``N``.
        seed: any int (``None``: fresh entropy); env ``i``'s ``e``-th episode starts from
            a state drawn from (seed, i, e) alone.
        xp: ``numpy`` (the twin) or ``cupy`` (the kernel, on CuPy's current device).
        check_every: on CuPy, read the out-of-range-action flag every this many steps.
    """

    observation_shape = (4,)
    observation_space = CartPole.observation_space
    _STATE = ("_key", "_state", "_elapsed", "_episodes", "_needs_reset", "_since_check")

    def __init__(self, num_envs: int, *, seed: int | None = None, xp: Any = np, check_every: int = 32) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"FusedCartPole needs num_envs >= 1, got {num_envs!r}")
        if int(num_envs) > 2**31 - 1:
            raise ValueError(f"FusedCartPole takes fewer than 2**31 envs, got {num_envs}")
        self.num_envs, self.xp, self.check_every = int(num_envs), xp, int(check_every)
        self.action_space = spaces.Discrete(2)
        self._key = seed_key(int(np.random.SeedSequence().entropy) if seed is None else int(seed))
        self._state = xp.zeros((4, self.num_envs), dtype=xp.float64)  # one row per variable
        self._elapsed = xp.zeros(self.num_envs, dtype=xp.int32)
        self._episodes = xp.zeros(self.num_envs, dtype=xp.uint32)
        self._needs_reset, self._since_check = True, 0
        self._bad = None  # the kernel's out-of-range flag (CuPy only)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_bad"] = None  # made again on the next step
        return state

    # -- protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Any:
        """Every env to a fresh start state; a ``seed`` restarts the stream (episode 0),
        none continues it (each env's next episode)."""
        advance = seed is None and not self._needs_reset
        if seed is not None:
            self._key = seed_key(int(seed))
            self._episodes[...] = 0
        if self.xp is np:
            if advance:
                self._episodes += np.uint32(1)
            self._state[...] = reset_draws(self._key, np.arange(self.num_envs), self._episodes).T
            self._elapsed[...] = 0
            obs = self._state.T.astype(np.float32)
        else:
            obs = self.xp.empty((self.num_envs, 4), self.xp.float32)
            reset, _ = _kernels(self.xp.cuda.Device().id)
            reset(
                self._grid(),
                (_THREADS,),
                (
                    np.uint64(self._key),
                    self._episodes,
                    np.int32(advance),
                    self._state,
                    self._elapsed,
                    obs,
                    np.int32(self.num_envs),
                ),
            )
        self._needs_reset = False
        return obs

    def step(self, actions: Any) -> StepResult:
        """Push left (0) or right (1) in every env; autoreset those that end."""
        if self._needs_reset:
            raise RuntimeError("FusedCartPole.step() called before reset(); call env.reset() first")
        actions = self._actions(actions)
        if self.xp is np:
            return self._step_numpy(actions)
        xp, n = self.xp, self.num_envs
        obs, final_obs = xp.empty((n, 4), xp.float32), xp.empty((n, 4), xp.float32)
        reward, ended_return = xp.empty(n, xp.float32), xp.empty(n, xp.float32)
        terminated, truncated = xp.empty(n, xp.bool_), xp.empty(n, xp.bool_)
        ended_length = xp.empty(n, xp.int64)
        if self._bad is None:
            self._bad = xp.zeros(1, xp.int32)
        _, step = _kernels(xp.cuda.Device().id)
        step(
            self._grid(),
            (_THREADS,),
            (
                actions,
                self._state,
                self._elapsed,
                self._episodes,
                obs,
                final_obs,
                reward,
                terminated,
                truncated,
                ended_return,
                ended_length,
                self._bad,
                np.uint64(self._key),
                np.int32(n),
            ),
        )
        self._since_check += 1
        if self._since_check >= self.check_every:
            self.check_actions()
        done = terminated | truncated
        info = {
            "final_obs": final_obs,
            "episode_return": EndedEpisodes(ended_return, done),
            "episode_length": EndedEpisodes(ended_length, done),
        }
        return obs, reward, terminated, truncated, info

    def check_actions(self) -> None:
        """Raise the out-of-range-action error if a step since the last check had one
        (reads one flag from the device)."""
        self._since_check = 0
        if self._bad is not None and int(self._bad[0]):
            self._bad[...] = 0
            raise self._range_error(f"in one of the last {self.check_every} steps")

    def close(self) -> None:
        """Nothing to release; present for the protocol."""

    @property
    def state(self) -> Any:
        """A copy of the float64 state ``[N, 4]`` = (x, x_dot, theta, theta_dot)."""
        return self._state.T.copy()

    # -- internals -----------------------------------------------------------------
    def _grid(self) -> tuple[int]:
        return ((self.num_envs + _THREADS - 1) // _THREADS,)

    def _actions(self, actions: Any) -> Any:
        xp = self.xp
        actions = xp.asarray(actions)  # NumPy actions onto the GPU: the host-actor path
        if actions.dtype.kind not in DISCRETE_KINDS or actions.size != self.num_envs:
            raise action_error("FusedCartPole", actions, (self.num_envs,), DISCRETE_KINDS)
        actions = xp.ascontiguousarray(actions.reshape(self.num_envs)).astype(xp.int64, copy=False)
        if xp is np and int(np.count_nonzero(actions >> 1)):
            bad = actions[(actions < 0) | (actions > 1)]
            raise self._range_error(f"(e.g. {int(bad[0])}, {bad.size} of {self.num_envs})")
        return actions

    @staticmethod
    def _range_error(where: str) -> ValueError:
        return ValueError(
            f"FusedCartPole.step: actions must be 0 (push left) or 1 (push right), as in "
            f"Discrete(2); got one out of range {where}. Check that the policy head has 2 "
            "outputs and that actions are sampled from it."
        )

    def _step_numpy(self, actions: np.ndarray) -> StepResult:
        """The kernel's arithmetic, vectorised (the same order of operations)."""
        x, x_dot, theta, theta_dot = self._state
        force = np.where(actions == 1, FORCE_MAG, -FORCE_MAG)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
        )
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        new = np.stack([x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc])
        terminated = (np.abs(new[0]) > X_THRESHOLD) | (np.abs(new[2]) > THETA_THRESHOLD_RADIANS)
        steps = self._elapsed + 1
        truncated = steps >= MAX_EPISODE_STEPS
        final_obs = new.T.astype(np.float32)
        done = terminated | truncated
        ended_length = np.where(done, steps, 0).astype(np.int64)
        ended = done.nonzero()[0]
        if ended.size:
            self._episodes[ended] += np.uint32(1)
            new[:, ended] = reset_draws(self._key, ended, self._episodes[ended]).T
            steps[ended] = 0
        self._state[...] = new
        self._elapsed[...] = steps
        info = {
            "final_obs": final_obs,
            "episode_return": EndedEpisodes(ended_length.astype(np.float32), done),
            "episode_length": EndedEpisodes(ended_length, done),
        }
        return new.T.astype(np.float32), np.ones(self.num_envs, np.float32), terminated, truncated, info
