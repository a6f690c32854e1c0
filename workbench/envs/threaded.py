"""Gymnasium envs stepped by a pool of threads, one contiguous slice per thread.

Threads help only environments that release the GIL while they simulate
(MuJoCo, C++ envs); pure-Python envs such as CartPole gain nothing and should
use an array env instead (see DESIGN.md, "Performance shape").
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from workbench.envs.base import StepResult
from workbench.envs.gym_vector import EnvFactory, GymVectorEnv, action_check, checked_actions

__all__ = ["ThreadedVectorEnv"]


class ThreadedVectorEnv:
    """``num_envs`` gymnasium envs split into ``threads`` slices stepped concurrently.

    Implements `workbench.envs.VectorEnv` (NumPy, same-step autoreset). Each
    slice is a `GymVectorEnv` seeded with its global env offset, so results
    equal a single `GymVectorEnv` of ``num_envs`` envs with the same seed.
    The calling thread steps the last slice itself, so ``threads=K`` uses a
    persistent pool of ``K - 1`` worker threads plus the caller.

    Args:
        factory: zero-argument callable returning a fresh ``gymnasium.Env``.
        num_envs: total number of envs.
        threads: number of slices stepped at once (capped at ``num_envs``).
        seed: seed used by the first `reset` when it is given none.

    Example::

        env = ThreadedVectorEnv(lambda: gymnasium.make("HalfCheetah-v5"), 16, threads=2, seed=0)
        obs = env.reset()
        obs, reward, terminated, truncated, info = env.step(np.zeros((16, 6), np.float32))
        env.close()
    """

    xp = np

    def __init__(self, factory: EnvFactory, num_envs: int, *, threads: int = 2, seed: int | None = None) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"ThreadedVectorEnv needs num_envs >= 1, got {num_envs!r}")
        if int(threads) < 1:
            raise ValueError(f"ThreadedVectorEnv needs threads >= 1, got {threads!r}")
        self.num_envs = int(num_envs)
        self.threads = min(int(threads), self.num_envs)
        bounds = np.linspace(0, self.num_envs, self.threads + 1).astype(int)
        self._slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self._envs = [GymVectorEnv(factory, s.stop - s.start, seed=seed, seed_offset=s.start) for s in self._slices]
        first = self._envs[0]
        self.action_space = first.action_space
        self.observation_space = first.observation_space
        self.observation_shape = first.observation_shape
        self._action_check = action_check(self.action_space, self.num_envs)
        self._pool = (
            ThreadPoolExecutor(self.threads - 1, thread_name_prefix="workbench-env") if self.threads > 1 else None
        )

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every slice (concurrently); env i is seeded with seed+i."""
        return np.concatenate(self._map(lambda env, _: env.reset(seed), [None] * self.threads))

    def step(self, actions: Any) -> StepResult:
        """Step every slice concurrently and join the results in env order."""
        actions = checked_actions(type(self).__name__, np.asarray(actions), self._action_check)
        if actions.shape[:1] != (self.num_envs,):  # a composite action space: axis 0 at least
            raise ValueError(
                f"ThreadedVectorEnv.step expects {self.num_envs} actions along axis 0, got shape {actions.shape}"
            )
        results = self._map(lambda env, a: env.step(a), [actions[s] for s in self._slices])
        obs, reward, terminated, truncated, infos = zip(*results)
        info = {
            key: np.concatenate([i[key] for i in infos]) for key in ("final_obs", "episode_return", "episode_length")
        }
        return (
            np.concatenate(obs),
            np.concatenate(reward),
            np.concatenate(terminated),
            np.concatenate(truncated),
            info,
        )

    def render(self, index: int = 0) -> Any:
        """Env ``index``'s frame (see `GymVectorEnv.render`)."""
        for part, env in zip(self._slices, self._envs):
            if part.start <= index < part.stop:
                return env.render(index - part.start)
        raise IndexError(f"env {index} of {self.num_envs}")

    def close(self) -> None:
        """Join the worker threads and close every env. Idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for env in self._envs:
            env.close()

    def _map(self, fn: Any, args: list[Any]) -> list[Any]:
        """``fn(env_j, args[j])`` for every slice j: all but the last on the pool."""
        if self._pool is None:
            if self.threads > 1:
                raise RuntimeError("ThreadedVectorEnv is closed")
            return [fn(self._envs[0], args[0])]
        futures = [self._pool.submit(fn, env, arg) for env, arg in zip(self._envs[:-1], args[:-1])]
        last = fn(self._envs[-1], args[-1])
        return [f.result() for f in futures] + [last]
