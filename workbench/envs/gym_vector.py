"""Any gymnasium env behind the `VectorEnv` protocol (the fallback of `make`).

Wraps ``gymnasium.vector.SyncVectorEnv`` in SAME_STEP autoreset mode (gymnasium
1.x defaults to NEXT_STEP, which returns a dummy reset transition the step after
an episode ends) and adds the protocol's dense ``final_obs`` and episode stats.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from workbench.envs.base import (
    CONTINUOUS_KINDS,
    DISCRETE_KINDS,
    EpisodeTracker,
    StepResult,
    action_error,
)

__all__ = ["GymVectorEnv"]

EnvFactory = Callable[[], gymnasium.Env]


class GymVectorEnv:
    """``num_envs`` gymnasium envs from ``factory``, stepped one after another.

    Implements `workbench.envs.VectorEnv` (NumPy, same-step autoreset).
    Env ``i`` is seeded with ``seed + seed_offset + i``, so a slice of a larger
    batch (see `ThreadedVectorEnv`) is seeded exactly as in the whole batch.

    Args:
        factory: zero-argument callable returning a fresh ``gymnasium.Env``.
        num_envs: number of envs.
        seed: seed used by the first `reset` when it is given none.
        seed_offset: added to every seed (index of this slice's first env).

    Example::

        env = GymVectorEnv(lambda: gymnasium.make("Acrobot-v1"), num_envs=4, seed=0)
        obs = env.reset()
        obs, reward, terminated, truncated, info = env.step(np.zeros(4, np.int64))
    """

    xp = np

    def __init__(self, factory: EnvFactory, num_envs: int, *, seed: int | None = None, seed_offset: int = 0) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"GymVectorEnv needs num_envs >= 1, got {num_envs!r}")
        self.num_envs = int(num_envs)
        self._vec = SyncVectorEnv([factory] * self.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
        self.action_space = self._vec.single_action_space
        self.observation_space = self._vec.single_observation_space
        self.observation_shape = tuple(self.observation_space.shape or ())
        self._initial_seed = seed
        self._seed_offset = int(seed_offset)
        self._tracker = EpisodeTracker(self.num_envs)
        self._action_check = action_check(self.action_space, self.num_envs)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; ``seed`` (else the constructor's, once) seeds env i with seed+i."""
        if seed is None:
            seed, self._initial_seed = self._initial_seed, None
        if seed is not None:
            seed = int(seed) + self._seed_offset
        obs, _ = self._vec.reset(seed=seed)
        self._tracker.reset()
        return np.asarray(obs, dtype=np.float32)

    def step(self, actions: Any) -> StepResult:
        """Step every env; ended envs are reset in the same call (see `VectorEnv`)."""
        actions = checked_actions(type(self).__name__, np.asarray(actions), self._action_check)
        obs, reward, terminated, truncated, gym_info = self._vec.step(actions)
        obs = np.asarray(obs, dtype=np.float32)
        reward = np.asarray(reward, dtype=np.float32)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated

        # gymnasium gives final_obs as an object array filled only where done;
        # the protocol promises a dense float32 [N, ...] array.
        final_obs = obs.copy()
        for i in np.flatnonzero(done):
            final_obs[i] = gym_info["final_obs"][i]
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {
            "final_obs": final_obs,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "gym_info": gym_info,
        }
        return obs, reward, terminated, truncated, info

    def render(self, index: int = 0) -> Any:
        """Env ``index``'s frame: an ``[H, W, 3]`` array when its gymnasium env was made with
        ``render_mode="rgb_array"`` (``make`` does so while ``run.show()`` records), else None."""
        return self._vec.envs[index].render()

    def close(self) -> None:
        """Close the underlying gymnasium envs."""
        self._vec.close()


#: (shape of N actions, their size, dtype kinds allowed) for a space with a fixed shape and
#: dtype (Box, Discrete, MultiDiscrete, MultiBinary); None for composite spaces (Dict, Tuple)
ActionCheck = Optional[tuple[tuple[int, ...], int, str]]


def action_check(space: gymnasium.Space, num_envs: int) -> ActionCheck:
    """What `checked_actions` compares a batch of ``num_envs`` actions of ``space`` with."""
    dtype = getattr(space, "dtype", None)
    if dtype is None or space.shape is None or dtype.kind not in "biuf":
        return None
    shape = (num_envs, *space.shape)
    kinds = CONTINUOUS_KINDS if dtype.kind == "f" else DISCRETE_KINDS
    return shape, int(np.prod(shape)), kinds


def checked_actions(env: str, actions: np.ndarray, check: ActionCheck) -> np.ndarray:
    """``actions`` as ``[N, *space.shape]`` (a same-sized batch is reshaped, e.g. ``[N, 1]``
    for a Discrete space), or a ``ValueError`` saying what was expected and what came."""
    if check is None:
        return actions
    shape, size, kinds = check
    if actions.dtype.kind not in kinds or (actions.shape != shape and actions.size != size):
        raise action_error(env, actions, shape, kinds)
    return actions if actions.shape == shape else actions.reshape(shape)
