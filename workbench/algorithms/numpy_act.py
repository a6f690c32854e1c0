"""PPO's ``act`` for a few observations on the CPU, in NumPy.

With a handful of envs per actor (CleanRL's 4, the quickstart's 16) one ``act`` is ~20
tiny tensor ops, and torch's per-op dispatch (~5-10 µs each) is nearly all of its time:
~150 µs a step, more than the env's. The same network in NumPy on the parameters' own
memory (views, no copies: optimiser steps and ``load_state_dict`` write in place, so the
views always hold the current weights) takes ~30 µs. The draw comes from torch's
generator (``torch.rand``), the one the actor's init cell seeded, by inverse CDF: the same
distribution as ``torch.multinomial``, reproducible from the same seed.

Used by `workbench.algorithms.ppo.ActorCritic.act` for NumPy observations of at most
`SMALL_BATCH` rows on a CPU network whose layers are all Linear / Tanh / ReLU and carry
no hooks; anything else takes the torch path.

Example:
    >>> import torch
    >>> from workbench.algorithms.ppo import ActorCritic, _sample
    >>> net = ActorCritic(4, 2, norm_obs=True)
    >>> obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    >>> action, logp, value = act_numpy(net, obs)
    >>> action.dtype, logp.dtype, value.shape
    (dtype('int64'), dtype('float32'), (3,))
    >>> with torch.no_grad():
    ...     _, _, v = _sample(net, torch.from_numpy(obs))
    >>> bool(np.allclose(value, v.numpy(), atol=1e-5))
    True
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from workbench.algorithms.layers import Tanh

__all__ = ["act_numpy", "numpy_layers", "SMALL_BATCH"]

#: rows up to which NumPy beats torch for the 64-wide MLP (``benchmarks/ppo_sweep.py``
#: ``--throughput`` at 4-64 envs; measured crossover on the 2-core host ~256 rows)
SMALL_BATCH = 128


def numpy_layers(seq: nn.Sequential) -> list | None:
    """``seq`` as a list of ``(W.T, b)`` views and ``"tanh"`` / ``"relu"`` marks, or None
    when a layer is of another kind or has hooks (the torch path then runs it)."""
    if seq._forward_hooks or seq._forward_pre_hooks:
        return None
    out: list = []
    for layer in seq:
        if layer._forward_hooks or layer._forward_pre_hooks:
            return None
        if type(layer) is nn.Linear and layer.weight.device.type == "cpu" and layer.weight.dtype == torch.float32:
            bias = None if layer.bias is None else layer.bias.detach().numpy()
            out.append((layer.weight.detach().numpy().T, bias))
        elif type(layer) in (Tanh, nn.Tanh):
            out.append("tanh")
        elif type(layer) is nn.ReLU:
            out.append("relu")
        else:
            return None
    return out


def _run(layers: list, x: np.ndarray) -> np.ndarray:
    for layer in layers:
        if layer == "tanh":
            x = np.tanh(x, out=x)
        elif layer == "relu":
            x = np.maximum(x, 0, out=x)
        else:
            weight_t, bias = layer
            x = x @ weight_t
            if bias is not None:
                x += bias
    return x


def _cached(agent) -> tuple | None:
    """(actor layers, critic layers, obs-norm arrays) for ``agent``, rebuilt when one of its
    layers or tensors was replaced (a new layer, ``.to(...)`` moving a tensor's memory):
    checked by the layers' identities and the tensors' addresses (and no hooks), ~4 µs (walking
    ``agent.parameters()`` alone takes ~25 µs)."""
    cache = agent.__dict__.get("_numpy_act")
    if cache is not None:
        modules, tensors, addresses, parts = cache
        now = _modules(agent)
        if all(a is b for a, b in zip(modules, now)) and all(t.data_ptr() == p for t, p in zip(tensors, addresses)):
            # a hook registered since must run: the torch path runs it
            hooked = any(m._forward_hooks or m._forward_pre_hooks for m in now if m is not None)
            return None if hooked else parts
    modules = _modules(agent)
    actor, critic = numpy_layers(agent.actor), numpy_layers(agent.critic)
    norm = agent.obs_norm
    if actor is None or critic is None or (norm is not None and (norm._forward_hooks or norm._forward_pre_hooks)):
        parts = None
    else:
        parts = (actor, critic, None if norm is None else (norm.shift.numpy(), norm.scale.numpy(), norm.clip))
    tensors = [
        t for m in modules if m is not None for t in (*m._parameters.values(), *m._buffers.values()) if t is not None
    ]
    agent.__dict__["_numpy_act"] = (modules, tensors, [t.data_ptr() for t in tensors], parts)
    return parts


def _modules(agent) -> tuple:
    # through the modules' own dicts: nn.Module.__getattr__ and Sequential.__iter__ cost
    # ~0.5 µs a call, and this runs every step
    children = agent._modules
    actor, critic = children["actor"], children["critic"]
    return (actor, *actor._modules.values(), critic, *critic._modules.values(), children.get("obs_norm"))


def act_numpy(agent, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(action, log-prob, value) for ``obs`` computed in NumPy, or None when ``agent``
    cannot be run so (see the module's doc)."""
    parts = _cached(agent)
    if parts is None:
        return None
    actor, critic, norm = parts
    x = np.asarray(obs, np.float32)
    if norm is not None:
        shift, scale, clip = norm
        x = (x - shift) * scale
        np.minimum(np.maximum(x, -clip, out=x), clip, out=x)  # np.clip costs 3x these two here
    logits = _run(actor, x)
    value = _run(critic, x)[:, 0]
    # the ufuncs' own reductions: what ndarray.max/.sum/np.cumsum run, without their Python
    # dispatch (~1 µs a call, a third of this function at a few rows); the same numbers
    logits -= _max(logits, axis=1, keepdims=True)
    logp_all = logits - np.log(_sum(np.exp(logits), axis=1, keepdims=True))
    cdf = _accumulate(np.exp(logp_all), axis=1)
    u = torch.rand(x.shape[0]).numpy()  # torch's generator, as seeded by the actor's init cell
    action = _sum(u[:, None] * cdf[:, -1:] > cdf[:, :-1], axis=1, dtype=np.int64)
    logp = logp_all[np.arange(len(action)), action]
    return action, logp.astype(np.float32, copy=False), value.astype(np.float32, copy=False)


_max, _sum, _accumulate = np.maximum.reduce, np.add.reduce, np.add.accumulate
