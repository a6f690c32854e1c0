"""Which episodes an evaluation counts, and an env proxy that finds them as they end.

Counting the first episodes to finish would favour the short ones; instead the episodes
are chosen before any is played — each env's first episode, then each env's second, … —
and the evaluation waits for all of them.

    >>> chosen_episodes(10, num_envs=4)
    {0: 3, 1: 3, 2: 2, 3: 2}
    >>> chosen_episodes(2, num_envs=4, only_env=0)
    {0: 2}
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["chosen_episodes", "EpisodeRecorder", "is_env", "host"]


def chosen_episodes(episodes: int, num_envs: int, only_env: int | None = None) -> dict[int, int]:
    """Env index → how many of its episodes (from its first) are counted."""
    if only_env is not None:
        return {only_env: episodes}
    return {env: episodes // num_envs + (env < episodes % num_envs) for env in range(min(episodes, num_envs))}


def is_env(value: Any) -> bool:
    """An environment: an object with ``reset``, ``step`` and ``close`` (the `VectorEnv` protocol's)."""
    return callable(getattr(value, "close", None)) and hasattr(value, "step") and hasattr(value, "reset")


def host(values: Any) -> np.ndarray:
    """``values`` as a NumPy array on the host (NumPy, CuPy, torch, `EndedEpisodes`)."""
    if type(values).__module__.startswith("cupy"):
        return values.get()
    if type(values).__module__.startswith("torch"):
        return values.detach().cpu().numpy()
    return np.asarray(values)


class EpisodeRecorder:
    """Stands in for a vectorised env in a cell's namespace: steps it, and keeps the return
    and length of each episode that ends (``info["episode_return"]``, env order, matched
    with ``terminated | truncated``), and a frame of env ``frame_env`` after each step
    while ``frames`` is a list. Anything else is the env's own attribute."""

    def __init__(self, env: Any, first_env: int = 0) -> None:
        self.env, self.first_env = env, first_env
        self.num_envs = int(getattr(env, "num_envs", 1))
        #: per env index (among all the evaluation's envs): [(return, length), …] in order
        self.ended: dict[int, list[tuple[float, int]]] = {}
        self.steps = 0
        self._lengths = np.zeros(self.num_envs, np.int64)
        self.frames: list[np.ndarray] | None = None
        self.frame_env = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, actions: Any):
        result = self.env.step(actions)
        obs, reward, terminated, truncated, info = result
        done = host(terminated).reshape(self.num_envs, -1).any(-1) | host(truncated).reshape(self.num_envs, -1).any(-1)
        self.steps += self.num_envs
        self._lengths += 1
        which = np.flatnonzero(done)
        if which.size:
            returns = host(info["episode_return"]).reshape(-1)
            for env, ret in zip(which, returns):
                self.ended.setdefault(self.first_env + int(env), []).append((float(ret), int(self._lengths[env])))
            self._lengths[which] = 0
        if self.frames is not None:
            self.frames.append(self.frame())
        return result

    def frame(self) -> np.ndarray:
        """Env ``frame_env``'s picture now, ``[H, W, 3]`` uint8."""
        frame = self.env.render(self.frame_env)
        return frame if isinstance(frame, np.ndarray) and frame.dtype == np.uint8 else np.asarray(frame, np.uint8)
