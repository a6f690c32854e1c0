"""The batched environment protocol every workbench env speaks.

A `VectorEnv` steps ``N`` copies of one environment at once and hands back
arrays with a leading batch axis. Array envs (`CartPole`) keep those arrays in
their own array module ``xp`` (NumPy, or CuPy on a GPU); gymnasium-backed envs
(`GymVectorEnv`, `ThreadedVectorEnv`) are always NumPy.

Autoreset: SAME-STEP
--------------------
When the episode of env ``i`` ends at a step (``terminated[i] or truncated[i]``),
that same `step` call already resets env ``i``:

- ``obs[i]`` is the FIRST observation of env ``i``'s next episode;
- ``info["final_obs"][i]`` is the LAST observation of the episode that ended
  (rows of ``final_obs`` where the env is not done hold no meaning);
- ``reward[i]``, ``terminated[i]``, ``truncated[i]`` belong to the ended episode.

So there is never a "dummy" reset step: every transition returned is a real one.

``info["episode_return"]`` (float32) and ``info["episode_length"]`` (int64) are
1-D host NumPy arrays with one entry per episode that ended at this step (in
env-index order; empty when none ended) — log them as ``charts/episodic_return``.

How algorithms mask
-------------------
``done = terminated | truncated`` cuts bootstrapping across the episode boundary:
the value of ``obs`` (a new episode) must never be used as the next value of the
transition that ended the old one. CleanRL's PPO stores ``dones[t] = next_done``
(the done flag returned by step ``t-1``) next to ``obs[t]`` and multiplies the
bootstrap by ``1 - dones[t+1]``; `workbench.kernels.gae` uses exactly that
convention. Treating truncation as termination (as CleanRL does) slightly biases
values at the time limit; to bootstrap truncated episodes instead, add
``gamma * V(info["final_obs"][i])`` to ``reward[i]`` where ``truncated[i]`` and
``not terminated[i]``.

Example::

    env = workbench.envs.make("CartPole-v1", num_envs=8, seed=0)
    obs = env.reset()                              # [8, 4] float32
    for _ in range(100):
        actions = env.xp.asarray(np.random.randint(0, 2, size=env.num_envs))
        obs, reward, terminated, truncated, info = env.step(actions)
        done = terminated | truncated              # cut bootstrapping here
        for r in info["episode_return"]:
            print("episodic_return", r)
    env.close()
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["VectorEnv", "StepResult", "EpisodeTracker", "SavesState", "action_error", "host_rng", "to_host"]

#: dtype kinds a discrete action may have (bool: a two-action env's False/True)
DISCRETE_KINDS = "biu"
#: dtype kinds a continuous action may have: floats only (integer actions into a continuous
#: env almost always come from a discrete policy head by mistake)
CONTINUOUS_KINDS = "f"

#: ``(obs, reward, terminated, truncated, info)`` as returned by `VectorEnv.step`.
StepResult = tuple[Any, Any, Any, Any, dict[str, Any]]


@runtime_checkable
class VectorEnv(Protocol):
    """``N`` environments stepped together, with same-step autoreset.

    Attributes:
        num_envs: ``N``, the batch size of every array the env returns.
        observation_shape: shape of ONE env's observation; ``obs`` is
            ``[N, *observation_shape]`` float32.
        action_space: the gymnasium space of ONE env's action; `step` takes a
            batch ``[N, *action_space.shape]`` of them.
        xp: the array module the arrays live in (``numpy`` or ``cupy``).
    """

    num_envs: int
    observation_shape: tuple[int, ...]
    action_space: Any
    xp: Any

    def reset(self, seed: int | None = None) -> Any:
        """Reset every env and return ``obs`` ``[N, *observation_shape]`` float32.

        ``seed`` reseeds the env deterministically; ``None`` continues the
        current random stream (the one chosen at construction).
        """
        ...

    def step(self, actions: Any) -> StepResult:
        """Step every env once; see the module docstring for autoreset and ``info``.

        Returns ``obs [N, ...] float32``, ``reward [N] float32``,
        ``terminated [N] bool``, ``truncated [N] bool`` and ``info`` with
        ``final_obs``, ``episode_return`` and ``episode_length``.
        """
        ...

    def close(self) -> None:
        """Release the env's resources (threads, simulators). Idempotent."""
        ...


class EpisodeTracker:
    """Running return/length per env, emitting those of episodes that end.

    Host-side NumPy bookkeeping shared by the gymnasium-backed envs (array envs
    keep theirs on their own device).

    Example::

        tracker = EpisodeTracker(num_envs=2)
        tracker.update(np.array([1.0, 1.0]), np.array([False, True]))
        # -> (array([1.], dtype=float32), array([1]))
    """

    def __init__(self, num_envs: int) -> None:
        # float64 accumulation: a float32 sum of thousands of small rewards drifts.
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> None:
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def update(self, reward: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add one step; return ``(episode_return, episode_length)`` of envs now done."""
        self.returns += reward
        self.lengths += 1
        ended_returns = self.returns[done].astype(np.float32)
        ended_lengths = self.lengths[done]  # boolean indexing copies
        self.returns[done] = 0.0
        self.lengths[done] = 0
        return ended_returns, ended_lengths


def host_rng(seed: int | None) -> np.random.Generator:
    """The random stream of an array env, on the HOST for every backend: a NumPy
    ``Generator`` whose draws the env moves to its device (``xp.asarray``).

    Why not ``cupy.random``: its generator holds a raw cuRAND handle (freed in ``__del__``,
    no ``__reduce__``/``__deepcopy__``), so an env carrying one cannot be deep-copied,
    pickled for a snapshot or checkpointed. Resets draw a few numbers per ended episode,
    so drawing them on the host costs little, and every backend resets to the same states.

    >>> host_rng(0).uniform(-0.05, 0.05, 2).round(4).tolist()
    [0.0137, -0.023]
    """
    # same construction as gymnasium's np_random(seed): with one env and the same seed,
    # resets draw the very numbers gymnasium's (and mpe2's) envs draw
    return np.random.default_rng(seed)


def to_host(array: Any) -> np.ndarray:
    """A NumPy array from a NumPy array (itself) or a device array (a copy: CuPy ``.get()``).

    >>> to_host(np.arange(3)).tolist()
    [0, 1, 2]
    """
    return array if isinstance(array, np.ndarray) else array.get()


def ended_envs(done: Any, xp: Any) -> tuple[np.ndarray, Any]:
    """Which envs ended this step, for an array env's autoreset: their indices on the host
    (to count them, to report stats) and on the env's device (to index its state)."""
    ended = to_host(done).ravel().nonzero()[0]  # np.flatnonzero, without its Python layers
    return ended, (ended if xp is np else xp.asarray(ended))


def empty_episode_stats() -> tuple[np.ndarray, np.ndarray]:
    """The ``(episode_return, episode_length)`` pair of a step where no episode ended."""
    return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)


class SavesState:
    """Mixin for array envs: ``state_dict()`` / ``load_state_dict()`` over the attributes
    named in ``_STATE`` (state arrays, step counters, the NumPy random generator), so a
    checkpoint restores environments mid-episode with their random streams.

    The env is also picklable and deep-copyable on every backend: its array module is
    saved by name, its random stream is a host ``Generator`` (`host_rng`), and a CuPy env
    unpickled where no GPU is usable (the notebook process, say) comes back as the same
    env on NumPy.

    Example:
        >>> from workbench.envs.cartpole import CartPole
        >>> a, b = CartPole(4, seed=1), CartPole(4, seed=2)
        >>> _ = a.reset(); _ = b.reset()
        >>> b.load_state_dict(a.state_dict())
        >>> bool((a.step(np.ones(4, np.int64))[0] == b.step(np.ones(4, np.int64))[0]).all())
        True
    """

    _STATE: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        """Copies of the ``_STATE`` attributes (arrays stay on the env's device)."""
        return {name: _copied(getattr(self, name)) for name in self._STATE}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["xp"] = getattr(self.xp, "__name__", "numpy")  # a module does not pickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        xp = _module_named(state.pop("xp", "numpy"))
        for name, value in state.items():  # arrays onto the module the env now runs on
            if _is_array(value):
                state[name] = to_host(value) if xp is np else xp.asarray(value)
        self.__dict__.update(state)
        self.xp = xp

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unknown = sorted(set(state) - set(self._STATE))
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unknown fields {unknown}")
        for name, value in state.items():
            current = getattr(self, name)
            if hasattr(current, "shape"):
                if tuple(value.shape) != tuple(current.shape):
                    raise ValueError(
                        f"{type(self).__name__}: saved {name} has shape "
                        f"{tuple(value.shape)}, this env has {tuple(current.shape)} "
                        "(a different num_envs or agent count)"
                    )
                saved = value
                if self.xp is np:  # a CuPy env's state into a NumPy env
                    value = to_host(value)
                value = self.xp.asarray(value, dtype=current.dtype)
                if value is saved:  # never share a buffer with the dict (or another env)
                    value = value.copy()
            else:
                # a copy: two envs loaded from one dict must not share one random stream
                value = _copied(value)
            setattr(self, name, value)


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or type(value).__module__.startswith("cupy")


def _module_named(name: str) -> Any:
    """``numpy``, or ``cupy`` where a GPU is usable (else NumPy: a CuPy env's snapshot opens
    in a process without a GPU)."""
    if name.split(".")[0] == "cupy":
        from workbench.kernels.array_module import gpu_available

        if gpu_available():
            import cupy

            return cupy
    return np


def _copied(value: Any) -> Any:
    import copy

    return value.copy() if hasattr(value, "copy") and hasattr(value, "shape") else copy.deepcopy(value)


def action_error(env: str, actions: Any, shape: tuple[int, ...], kinds: str) -> ValueError:
    """The ``ValueError`` an env's ``step`` raises for actions of the wrong shape or dtype:
    what it expects, what came, and the usual cause. Built only on error (the check itself
    is a shape comparison and a dtype-kind lookup, so ``step`` stays cheap)."""
    got_shape, got_dtype = tuple(actions.shape), actions.dtype
    if kinds == CONTINUOUS_KINDS:
        wanted = "floating-point values"
        dtype_advice = "Continuous actions are floats: pass the policy's (clipped) sample, e.g. as .astype(np.float32)."
    else:
        wanted = "integer values (one discrete action each)"
        dtype_advice = (
            "Discrete actions are integers: sample or argmax the policy's output "
            "(e.g. torch.distributions.Categorical(logits=...).sample()) instead "
            "of passing logits or probabilities; floats are not rounded here."
        )
    size = int(np.prod(shape))
    if got_shape != shape and int(np.prod(got_shape)) != size:
        advice = (
            f"step takes one action per env along axis 0 (num_envs = {shape[0]}): check the "
            "actor's batch size and that it hands over the sampled actions, not a "
            "per-action output."
        )
    else:
        advice = dtype_advice
    return ValueError(
        f"{env}.step expects actions of shape {shape} with {wanted}; got shape {got_shape}, dtype {got_dtype}. {advice}"
    )
