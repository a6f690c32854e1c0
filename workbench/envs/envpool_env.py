"""EnvPool's C++ env pools behind the `VectorEnv` protocol (the optional ``envpool`` extra).

EnvPool (``pip install "workbench[envpool]"``) steps its envs in C++ threads that never hold
the GIL, so MuJoCo and classic-control envs step several times faster than gymnasium's
per-env Python loop. `make` picks it for the ids EnvPool has (``HalfCheetah-v5``,
``Pendulum-v1``, Atari, dm_control…) when it is installed, except ``CartPole-v1``, whose
NumPy array env is faster still; ``backend="envpool"`` asks for it explicitly.

Two things differ from gymnasium and are hidden here:

- **Autoreset.** EnvPool resets an ended env on the NEXT step (that step ignores the action
  and returns the first observation with reward 0). `EnvPoolVectorEnv` resets it in the SAME
  step, as every workbench env does (see `workbench.envs.base`): right after a step that ended
  episodes it steps only the ended envs once more (EnvPool's ``env_id`` argument) and puts
  their first observations in ``obs``; the ended episodes' last ones go to
  ``info["final_obs"]``. Those reset steps are no transitions and are not counted.
- **dtypes.** EnvPool's MuJoCo observations are float64; the protocol's are float32.

Stepping is EnvPool's asynchronous pair: `send` hands the actions to the C++ threads and
returns at once, `recv` waits for the results, and ``step(a)`` is ``send(a); recv()``. Work
done between `send` and `recv` (logging, a normaliser, the learner of another loop) overlaps
the simulation.

Example::

    env = EnvPoolVectorEnv("HalfCheetah-v5", num_envs=8, seed=0)
    obs = env.reset()                                   # [8, 17] float32
    env.send(np.zeros((8, 6), np.float32))              # the C++ threads step...
    obs, reward, terminated, truncated, info = env.recv()   # ...while this thread was free
    env.steps_taken                                     # 8: transitions, from EnvPool's counters
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import warnings
from typing import Any, Iterator

import numpy as np

from workbench.context import step_elsewhere
from workbench.envs.base import EpisodeTracker, StepResult
from workbench.envs.gym_vector import action_check, checked_actions

__all__ = ["EnvPoolVectorEnv", "envpool_available", "envpool_has"]

INSTALL_HINT = 'pip install "workbench[envpool]" (or pip install envpool)'


def envpool_available() -> bool:
    """True when the ``envpool`` package can be imported (looked up, not imported: importing
    it costs about a second).

    >>> isinstance(envpool_available(), bool)
    True
    """
    return importlib.util.find_spec("envpool") is not None


def envpool_has(env_id: str) -> bool:
    """True when EnvPool is installed and registers ``env_id`` (``"HalfCheetah-v5"``).

    >>> envpool_has("No-Such-Env-v0")
    False
    """
    return envpool_available() and env_id in _envpool_ids()


@functools.cache
def _envpool_ids() -> frozenset[str]:
    import envpool  # about a second, once

    return frozenset(envpool.list_all_envs())


@contextlib.contextmanager
def _float64_boxes_quiet() -> Iterator[None]:
    """EnvPool builds float64 Boxes with float32 bounds, and gymnasium warns at every one."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
        yield


class EnvPoolVectorEnv:
    """``num_envs`` EnvPool envs of ``env_id``, stepped by EnvPool's C++ threads.

    Implements `workbench.envs.VectorEnv` (NumPy, same-step autoreset), plus EnvPool's
    asynchronous `send`/`recv` (``step`` is the two in a row).

    Args:
        env_id: an id EnvPool registers (``envpool.list_all_envs()``).
        num_envs: number of envs ``N``.
        seed: seeds the pool (EnvPool seeds env ``i`` from it); ``reset(seed=…)`` builds the
            pool again with another seed, since EnvPool takes seeds only when it is made.
        threads: EnvPool's C++ threads; ``None`` lets EnvPool choose (one per core, at most
            ``N``).
        **options: passed on to ``envpool.make`` (``max_episode_steps=``, ``frame_skip=``…).

    Attributes:
        steps_taken: transitions stepped so far, counted from EnvPool's own per-env
            ``elapsed_step`` counters (a reset step, counter 0, is no transition), so it is
            the env's count, not the caller's. ``info["elapsed_step"]`` holds the counters:
            each env's steps in its episode (for an env that ended, the ended episode's).

    Example::

        env = EnvPoolVectorEnv("Pendulum-v1", num_envs=4, seed=0)
        obs = env.reset()
        obs, reward, terminated, truncated, info = env.step(np.zeros((4, 1), np.float32))
        env.close()
    """

    xp = np

    def __init__(
        self, env_id: str, num_envs: int, *, seed: int | None = None, threads: int | None = None, **options: Any
    ) -> None:
        if not envpool_available():
            raise ImportError(f"EnvPoolVectorEnv needs EnvPool: {INSTALL_HINT}")
        if int(num_envs) < 1:
            raise ValueError(f"EnvPoolVectorEnv needs num_envs >= 1, got {num_envs!r}")
        if not envpool_has(env_id):
            raise ValueError(
                f"EnvPool has no environment {env_id!r} (envpool.list_all_envs() "
                "lists its ids); use backend='gymnasium' for gymnasium's envs"
            )
        self.env_id, self.num_envs = env_id, int(num_envs)
        self._threads, self._options = threads, options
        self._seed = 0 if seed is None else int(seed)
        self._pool = self._make_pool(self._seed)
        self.action_space = self._pool.single_action_space
        self.observation_space = self._pool.single_observation_space
        self.observation_shape = tuple(self.observation_space.shape or ())
        self._action_check = action_check(self.action_space, self.num_envs)
        self._tracker = EpisodeTracker(self.num_envs)
        self._all_ids = np.arange(self.num_envs, dtype=np.int32)
        self._fresh = True  # the pool as made: its first reset needs no rebuild
        self._in_flight = False
        self.steps_taken = 0

    def _make_pool(self, seed: int) -> Any:
        import envpool

        with _float64_boxes_quiet():
            pool = envpool.make(
                self.env_id,
                env_type="gymnasium",
                num_envs=self.num_envs,
                batch_size=self.num_envs,
                seed=seed,
                num_threads=0 if self._threads is None else int(self._threads),
                **self._options,
            )
            pool.observation_space, pool.action_space  # built (and cached) on first use
        return pool

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; ``seed`` rebuilds the pool with that seed (``None``: the stream
        goes on, from the constructor's seed the first time)."""
        self._drain()
        if seed is not None and not (self._fresh and int(seed) == self._seed):
            self._pool.close()
            self._seed = int(seed)
            self._pool = self._make_pool(self._seed)
        self._fresh = False
        obs, _ = self._pool.reset()
        self._tracker.reset()
        return np.asarray(obs, dtype=np.float32)

    def send(self, actions: Any) -> None:
        """Hand one action per env to EnvPool's threads and return at once; `recv` collects."""
        if self._in_flight:
            raise RuntimeError(
                f"{type(self).__name__}.send called twice without recv: every send needs its recv (step does both)"
            )
        actions = checked_actions(type(self).__name__, np.asarray(actions), self._action_check)
        self._pool.send(actions, self._all_ids)
        self._in_flight = True

    def recv(self) -> StepResult:
        """Wait for the step `send` started; return it as `step` does (ended envs reset)."""
        if not self._in_flight:
            raise RuntimeError(f"{type(self).__name__}.recv called without a send before it")
        obs, reward, terminated, truncated, pool_info = self._pool.recv()
        self._in_flight = False
        order = np.argsort(pool_info["env_id"])  # EnvPool may answer in any order
        obs = np.asarray(obs, dtype=np.float32)[order]
        reward = np.asarray(reward, dtype=np.float32)[order]
        terminated = np.asarray(terminated, dtype=bool)[order]
        truncated = np.asarray(truncated, dtype=bool)[order]
        done = terminated | truncated
        final_obs = obs
        ended = np.flatnonzero(done)
        if ended.size:
            final_obs = obs.copy()
            obs[ended] = self._reset_ended(ended)
        elapsed = np.asarray(pool_info["elapsed_step"])[order]
        self.steps_taken += int(np.count_nonzero(elapsed))  # 0 would be a reset, no transition
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {
            "final_obs": final_obs,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "elapsed_step": elapsed,
        }
        return obs, reward, terminated, truncated, info

    def step(self, actions: Any) -> StepResult:
        """Step every env once (`send` then `recv`); see `VectorEnv` for autoreset. Between
        the two, another replica stepped as a lane of this thread acts (``lanes=True``)."""
        self.send(actions)
        step_elsewhere()
        return self.recv()

    def _reset_ended(self, ended: np.ndarray) -> np.ndarray:
        """EnvPool's reset step for the envs in ``ended`` (their action is ignored): their
        first observations. Only those envs step, the rest wait for the next `send`."""
        dummy = np.zeros((ended.size, *(self.action_space.shape or ())), dtype=self.action_space.dtype)
        self._pool.send(dummy, ended.astype(np.int32))
        obs, *_, pool_info = self._pool.recv()
        if np.any(pool_info["elapsed_step"] != 0):  # EnvPool's next-step autoreset changed?
            raise RuntimeError(
                f"EnvPool {self.env_id}: the step after an episode ended did not "
                "reset the env; this EnvPool version's autoreset is not supported"
            )
        return np.asarray(obs, dtype=np.float32)[np.argsort(pool_info["env_id"])]

    def _drain(self) -> None:
        if self._in_flight:  # a send without its recv (an exception in between): collect it
            self._pool.recv()
            self._in_flight = False

    def close(self) -> None:
        """Stop EnvPool's threads. Idempotent."""
        if self._pool is not None:
            self._drain()
            self._pool.close()
            self._pool = None

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            f"an EnvPoolVectorEnv ({self.env_id}) cannot be pickled: its envs live "
            "in EnvPool's C++ threads; build it in the fragment's init cell of the "
            "replica that steps it"
        )
