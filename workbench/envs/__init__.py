"""Batched RL environments behind one protocol, `VectorEnv`.

``make("CartPole-v1", N)`` gives the vectorised array CartPole (NumPy, or CuPy
on request), ``make("simple_spread_v3", N)`` the multi-agent MPE simple_spread
(`SimpleSpread`); an id EnvPool has (``HalfCheetah-v5``…) gives EnvPool's C++ pool
(`EnvPoolVectorEnv`) when EnvPool is installed; any other gymnasium id, or a factory,
gives gymnasium envs behind the same protocol (threaded when ``threads > 1``).
"""

from __future__ import annotations

import difflib
import functools
import numbers
from typing import Any, Callable

import numpy as np

from workbench.context import env_seed, render_mode
from workbench.envs.base import EpisodeTracker, StepResult, VectorEnv
from workbench.envs.cartpole import CartPole
from workbench.envs.cartpole_device import FusedCartPole
from workbench.envs import envpool_env
from workbench.envs.envpool_env import EnvPoolVectorEnv, envpool_available, envpool_has
from workbench.envs.gym_vector import GymVectorEnv
from workbench.envs.simple_spread import SimpleSpread
from workbench.envs.threaded import ThreadedVectorEnv

__all__ = [
    "ARRAY_ENVS",
    "CartPole",
    "EnvPoolVectorEnv",
    "EpisodeTracker",
    "FusedCartPole",
    "GymVectorEnv",
    "SimpleSpread",
    "StepResult",
    "ThreadedVectorEnv",
    "VectorEnv",
    "make",
]

#: ids with an array implementation: id -> class taking (num_envs, seed=, xp=).
ARRAY_ENVS: dict[str, Callable[..., Any]] = {
    "CartPole-v1": CartPole,
    "simple_spread_v3": SimpleSpread,  # multi-agent: reward [N, agents]
}

#: ids whose GPU version is built otherwise than the NumPy one (taking the same arguments):
#: CartPole's one fused kernel per step instead of its NumPy code run through CuPy;
#: SimpleSpread's resets drawn on the device instead of from mpe2's host stream
GPU_ENVS: dict[str, Callable[..., Any]] = {
    "CartPole-v1": FusedCartPole,
    "simple_spread_v3": functools.partial(SimpleSpread, resets="counter"),
}

_BACKENDS = ("auto", "numpy", "cpu", "cupy", "gpu", "envpool", "gymnasium")


def make(
    id_or_factory: str | Callable[[], Any],
    num_envs: int,
    *,
    seed: int | None = None,
    backend: str = "auto",
    threads: int | None = None,
    device: str = "cpu",
) -> VectorEnv:
    """Build ``num_envs`` environments behind the `VectorEnv` protocol.

    Args:
        id_or_factory: a gymnasium id (``"CartPole-v1"``, ``"HalfCheetah-v5"``,
            ``"module:Id-v0"``) or a zero-argument callable returning a
            ``gymnasium.Env``.
        num_envs: number of envs ``N``.
        seed: seeds the envs (used by the first ``reset()`` given no seed).
        backend: ``"auto"`` — the NumPy array env for ids in `ARRAY_ENVS`, else
            EnvPool for the ids it has when it is installed (`EnvPoolVectorEnv`),
            else gymnasium; ``"envpool"`` — always EnvPool (error if it is not
            installed or lacks the id); ``"numpy"``/``"cpu"`` or ``"cupy"``/``"gpu"`` —
            the array env on that module (error if the id has none, or no GPU);
            ``"cuda:K"`` — the CuPy array env on GPU ``K`` (so
            ``backend=replica.device`` puts a replica's env where the replica runs);
            ``"gymnasium"`` — always the gymnasium-backed env.
        device: where the fragment that steps the env runs (``replica.device``). With
            ``backend="auto"`` and a GPU (``"cuda:K"``), an id with a GPU version
            (`GPU_ENVS`: CartPole-v1's fused kernel, SimpleSpread's device resets) or an
            array version runs there, and its arrays stay on that GPU; any other env
            stays on the host (its NumPy arrays go to the GPU where the actor puts
            them). ``"cpu"`` changes nothing.
        threads: for gymnasium-backed envs, step ``threads`` slices
            concurrently (`ThreadedVectorEnv`); ``None``/1 steps them in the
            calling thread. For EnvPool, its C++ threads (``None``: EnvPool's
            choice, one per core). Ignored by array envs, vectorised already.

    Example::

        env = make("CartPole-v1", num_envs=1024, seed=0)       # NumPy array env
        env = make("CartPole-v1", 4096, device="cuda:0")     # one fused kernel per step
        env = make("HalfCheetah-v5", num_envs=8)               # EnvPool when installed
        env = make("HalfCheetah-v5", num_envs=8, threads=2, backend="gymnasium")
        env = make(lambda: MyEnv(), num_envs=4)                # any gymnasium.Env
    """
    if backend not in _BACKENDS and not str(backend).startswith("cuda:"):
        raise ValueError(
            f"unknown backend {backend!r}: use one of {', '.join(_BACKENDS)}, "
            "or a device: 'cuda:K' (a replica's device, replica.device)"
        )
    if not isinstance(num_envs, numbers.Integral) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if str(device) != "cpu" and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'cpu' or 'cuda:K' (replica.device), got {device!r}")
    if threads is not None and (not isinstance(threads, numbers.Integral) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    seed, rendering = env_seed(seed), render_mode()  # an evaluation's held-out seeds; run.show's frames
    if rendering and backend == "auto" and isinstance(id_or_factory, str) and id_or_factory in _gym_ids():
        backend = "gymnasium"  # gymnasium's envs draw frames (the same dynamics for CartPole-v1)

    if callable(id_or_factory):
        if backend == "envpool":
            raise ValueError(
                "backend='envpool' needs an id EnvPool has (envpool.list_all_envs()); "
                "a factory is Python code EnvPool's C++ pool cannot run: pass the id, "
                "or use backend='auto' for gymnasium's envs"
            )
        if backend not in ("auto", "gymnasium"):
            raise ValueError(
                f"backend={backend!r} needs an id with an array implementation "
                f"({', '.join(ARRAY_ENVS)}); a factory can only be gymnasium-backed"
            )
        return _gymnasium_env(id_or_factory, num_envs, seed, threads)
    if not isinstance(id_or_factory, str):
        raise TypeError(
            "make() takes a gymnasium id (str) or a zero-argument callable returning "
            f"a gymnasium.Env, got {type(id_or_factory).__name__}"
        )

    env_id = id_or_factory
    if str(device).startswith("cuda:") and backend == "auto" and env_id in ARRAY_ENVS:
        backend = str(device)  # the array env on the replica's GPU
    if backend not in ("gymnasium", "envpool") and env_id in ARRAY_ENVS:
        xp = _array_module(backend)
        kind = GPU_ENVS.get(env_id, ARRAY_ENVS[env_id]) if xp is not np else ARRAY_ENVS[env_id]
        return kind(int(num_envs), seed=seed, xp=xp)
    if backend == "envpool" or (backend == "auto" and envpool_has(env_id)):
        return _envpool_env(env_id, int(num_envs), seed, threads)
    if backend not in ("auto", "gymnasium"):
        raise ValueError(
            f"{env_id!r} has no array implementation for backend={backend!r} "
            f"(array envs: {', '.join(ARRAY_ENVS)}); use backend='auto' or 'gymnasium'"
        )
    _check_registered(env_id)

    import gymnasium

    return _gymnasium_env(lambda: gymnasium.make(env_id, render_mode=rendering), num_envs, seed, threads)


def _gym_ids():
    import gymnasium

    return gymnasium.registry


def _array_module(backend: str) -> Any:
    from workbench.kernels.array_module import get_xp

    # "auto" means NumPy here: the GPU is used only when asked for, since a
    # CuPy env hands back device arrays the caller must be ready for.
    return get_xp("cpu" if backend == "auto" else backend)


def _envpool_env(env_id: str, num_envs: int, seed: int | None, threads: int | None) -> VectorEnv:
    if not envpool_available():
        raise ValueError(
            f"backend='envpool' needs EnvPool, which is not installed: "
            f"{envpool_env.INSTALL_HINT}; or use backend='auto' (gymnasium for {env_id!r})"
        )
    return EnvPoolVectorEnv(env_id, num_envs, seed=seed, threads=threads)


def _gymnasium_env(factory: Callable[[], Any], num_envs: int, seed: int | None, threads: int | None) -> VectorEnv:
    if threads is not None and threads > 1:
        return ThreadedVectorEnv(factory, num_envs, threads=threads, seed=seed)
    return GymVectorEnv(factory, num_envs, seed=seed)


def _check_registered(env_id: str) -> None:
    """Raise a helpful ValueError for an id neither gymnasium nor workbench knows."""
    import gymnasium

    if ":" in env_id or env_id in gymnasium.registry:
        return  # "module:Id" ids register themselves when gymnasium.make imports module
    known = sorted(set(gymnasium.registry) | set(ARRAY_ENVS))
    # compared case-blind: "cartpole-v1" is a typo of "CartPole-v1", not a new id
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=5, cutoff=0.6)
    hint = (
        f" Did you mean {', '.join(repr(by_lower[c]) for c in close)}?"
        if close
        else " No known id is close (gymnasium.pprint_registry() lists the registered ones)."
    )
    raise ValueError(
        f"unknown environment id {env_id!r}.{hint} make() accepts an id registered in "
        "gymnasium.registry (import the package that registers it first, e.g. "
        "`import ale_py`, or pass 'module:Id-v0'), an array env id "
        f"({', '.join(ARRAY_ENVS)}), or a zero-argument callable returning a gymnasium.Env."
    )
