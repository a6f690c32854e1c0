"""CartPole-v1 as one array program over ``N`` envs, for NumPy or CuPy.

The dynamics are gymnasium 1.4's ``CartPoleEnv`` line for line (euler
integrator, same constants, same float64 state, same termination thresholds,
reward 1.0 on every step including the terminating one) plus the ``TimeLimit``
of 500 steps that ``gymnasium.make("CartPole-v1")`` adds. On NumPy the same
expressions in the same order keep results bit-identical to gymnasium's, which the
tests check step for step. On CuPy they are close, not identical (CUDA's sin/cos
round differently; the tests compare with a tolerance), while reset states are the
same on both: they are drawn on the host (`host_rng`) and moved to the device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from workbench.envs.base import (
    DISCRETE_KINDS,
    SavesState,
    StepResult,
    action_error,
    empty_episode_stats,
    ended_envs,
    host_rng,
    to_host,
)

__all__ = ["CartPole"]

# gymnasium.envs.classic_control.cartpole.CartPoleEnv.__init__, verbatim.
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD_RADIANS = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500  # CartPole-v1's TimeLimit
RESET_LOW, RESET_HIGH = -0.05, 0.05


def _make_rng(xp: Any, seed: int | None) -> np.random.Generator:
    """The env's random stream: on the host for every ``xp`` (see `host_rng`). With N=1 and
    the same seed, resets draw the very numbers gymnasium's CartPole draws."""
    return host_rng(seed)


class CartPole(SavesState):
    """``N`` CartPole-v1 envs stepped as arrays of module ``xp`` (NumPy or CuPy).

    Implements `workbench.envs.VectorEnv` with same-step autoreset. State is
    kept float64 as gymnasium does; observations are float32.

    Args:
        num_envs: number of envs ``N``.
        seed: seed of this instance's generator (used by resets, including
            autoresets); ``None`` draws fresh entropy.
        xp: ``numpy`` (default) or ``cupy``.

    Example::

        env = CartPole(num_envs=1024, seed=0)
        obs = env.reset()                                   # [1024, 4] float32
        obs, reward, terminated, truncated, info = env.step(np.ones(1024, np.int64))
        info["episode_return"]                              # returns of episodes that ended
    """

    observation_shape = (4,)
    observation_space = spaces.Box(
        -np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD_RADIANS * 2, np.inf], np.float32),
        np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD_RADIANS * 2, np.inf], np.float32),
        dtype=np.float32,
    )

    #: what a checkpoint saves (see SavesState)
    _STATE = ("_rng", "_state", "_elapsed", "_needs_reset")

    def __init__(self, num_envs: int, *, seed: int | None = None, xp: Any = np) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"CartPole needs num_envs >= 1, got {num_envs!r}")
        self.num_envs = int(num_envs)
        self.xp = xp
        self.action_space = spaces.Discrete(2)  # per instance: a space carries its own RNG
        self._rng = _make_rng(xp, seed)
        # [4, N]: each state variable is one contiguous row, so the vectorised
        # arithmetic below runs on contiguous memory.
        self._state = xp.zeros((4, self.num_envs), dtype=xp.float64)
        self._elapsed = xp.zeros(self.num_envs, dtype=xp.int32)
        self._needs_reset = True
        self._make_constants()

    def _make_constants(self) -> None:
        """Arrays every step uses, made once (at 16 envs, building them each step cost
        as much as the physics), and made again where an unpickled env lands (a
        checkpoint written before they existed, or onto another array module)."""
        xp = self.xp
        self._forces = xp.asarray([-FORCE_MAG, FORCE_MAG])  # by action: 0 → -F, 1 → +F
        self._rewards = xp.ones(self.num_envs, dtype=xp.float32)  # handed out as copies

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        del state["_forces"], state["_rewards"]  # derived: __setstate__ makes them again
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._make_constants()

    # -- protocol ------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Any:
        """Reset all envs to states uniform in [-0.05, 0.05]; return obs ``[N, 4]``."""
        if seed is not None:
            self._rng = _make_rng(self.xp, seed)
        self._state[...] = self._draw_initial_states(self.num_envs).T
        self._elapsed[...] = 0
        self._needs_reset = False
        return self._observe()

    def step(self, actions: Any) -> StepResult:
        """Push left (0) or right (1) in every env; autoreset those that end."""
        if self._needs_reset:
            raise RuntimeError("CartPole.step() called before reset(); call env.reset() first")
        xp = self.xp
        actions = self._check_actions(actions)
        x, x_dot, theta, theta_dot = self._state  # views: updated in place below

        # gymnasium's expressions in gymnasium's order, so rounding matches bit for bit.
        force = self._forces[actions]  # exactly ±FORCE_MAG: gymnasium's conditional
        costheta = xp.cos(theta)
        sintheta = xp.sin(theta)
        temp = (force + POLEMASS_LENGTH * xp.square(theta_dot) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASSPOLE * xp.square(costheta) / TOTAL_MASS)
        )
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        # Euler: each update reads the OLD value of the variable updated after it.
        x += TAU * x_dot
        x_dot += TAU * xacc
        theta += TAU * theta_dot
        theta_dot += TAU * thetaacc

        # |x| > t is exactly (x < -t or x > t): negation and abs are exact.
        terminated = (xp.abs(x) > X_THRESHOLD) | (xp.abs(theta) > THETA_THRESHOLD_RADIANS)
        self._elapsed += 1
        truncated = self._elapsed >= MAX_EPISODE_STEPS
        reward = self._rewards.copy()

        final_obs = self._observe()
        obs, episode_return, episode_length = self._autoreset(terminated | truncated, final_obs)
        info = {
            "final_obs": final_obs,
            "episode_return": episode_return,
            "episode_length": episode_length,
        }
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release; present for the protocol."""

    # -- state access (tests, debugging, custom starts) ------------------------------

    @property
    def state(self) -> Any:
        """A copy of the float64 state ``[N, 4]`` = (x, x_dot, theta, theta_dot)."""
        return self._state.T.copy()

    @property
    def elapsed_steps(self) -> Any:
        """A copy of the steps taken in each env's current episode, ``[N]`` int32."""
        return self._elapsed.copy()

    def set_state(self, state: Any, elapsed_steps: Any = None) -> None:
        """Overwrite the state ``[N, 4]`` (and optionally the step counters ``[N]``)."""
        state = self.xp.asarray(state, dtype=self.xp.float64)
        if state.shape != (self.num_envs, 4):
            raise ValueError(f"state must have shape ({self.num_envs}, 4), got {state.shape}")
        self._state[...] = state.T
        if elapsed_steps is not None:
            self._elapsed[...] = self.xp.asarray(elapsed_steps, dtype=self.xp.int32)
        self._needs_reset = False

    # -- internals -----------------------------------------------------------------

    def _draw_initial_states(self, count: int) -> Any:
        draw = self._rng.uniform(RESET_LOW, RESET_HIGH, size=(count, 4))
        return draw if self.xp is np else self.xp.asarray(draw)  # host draw → device

    def _observe(self) -> Any:
        return self._state.T.astype(self.xp.float32, order="C")

    def _check_actions(self, actions: Any) -> Any:
        actions = self.xp.asarray(actions)
        # The dtype is checked (floats would silently push left: only 1 pushes right), and
        # the values, as gymnasium asserts: an action 7 from a head of the wrong width must
        # not quietly push left. On CuPy this reads one flag back per step (a device
        # sync; the autoreset reads `done` back anyway).
        if actions.dtype.kind not in DISCRETE_KINDS or (
            actions.shape != (self.num_envs,) and actions.size != self.num_envs
        ):
            raise action_error("CartPole", actions, (self.num_envs,), DISCRETE_KINDS)
        if actions.shape != (self.num_envs,):
            actions = actions.reshape(self.num_envs)  # e.g. [N, 1] from a policy head
        if actions.dtype.kind == "b":
            return actions.view(self.xp.uint8)  # an index: False → 0, True → 1
        # out of {0, 1} ⇔ a bit above the lowest is set (negatives set them all);
        # count_nonzero is one C call where ((a < 0) | (a > 1)).any() is four
        if int(self.xp.count_nonzero(actions >> 1)):
            bad = to_host(actions)
            bad = bad[(bad < 0) | (bad > 1)]
            raise ValueError(
                f"CartPole.step: actions must be 0 (push left) or 1 (push right), as in "
                f"Discrete(2); got {bad.size} out of range (e.g. {int(bad[0])}). Check that the "
                "policy head has 2 outputs and that actions are sampled from it."
            )
        return actions

    def _autoreset(self, done: Any, final_obs: Any) -> tuple[Any, np.ndarray, np.ndarray]:
        """Reset the envs where ``done``; return (obs, episode returns, lengths)."""
        xp = self.xp
        ended, index = ended_envs(done, xp)
        if ended.size == 0:
            return (final_obs.copy(), *empty_episode_stats())
        lengths = self._elapsed[index]
        lengths = to_host(lengths).astype(np.int64)
        fresh = self._draw_initial_states(ended.size)
        self._state[:, index] = fresh.T
        self._elapsed[index] = 0
        obs = final_obs.copy()
        obs[index] = fresh.astype(xp.float32)
        # Reward is 1.0 on every step, so an episode's return is its length.
        return obs, lengths.astype(np.float32), lengths
