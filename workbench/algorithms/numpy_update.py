"""PPO's minibatch step on the CPU with the forward and backward pass in NumPy.

The quickstart's network is two 64-wide tanh MLPs; a minibatch step in torch is ~100 tiny
ops (forward, autograd's backward, clipping), each paying torch's per-op dispatch, so at
CartPole's batch sizes the step costs ~1.5 ms of which the arithmetic is a small part, and
the learner was the bound of every CPU run (issue 29). Here the same loss is written out
with its gradient by hand, in NumPy on the parameters' own memory: ~45 NumPy calls. The
gradients land in ``p.grad`` (views of one flat buffer, so clipping reads one vector) and
the run's own torch optimizer takes the step, so its state, its settings and checkpoints
are what they would be on the torch path.

Used by `workbench.algorithms.ppo.ppo_update` for a CPU network of Linear/Tanh layers
without hooks (the quickstart's `ActorCritic`), a single learner, up to `MAX_ROWS` rows per
minibatch, the loss options it implements (value clipping off) and thread pools that
cannot fight (`_one_pool_spins`); anything else takes the torch path.
``tests/test_numpy_update.py`` holds it to the torch path's gradients.

The steps run with torch on one thread in the calling thread (`one_torch_thread`): the
optimizer's step is torch's only parallel op here, and a worker with ``--nthreads 2`` gives
torch 2 threads, whose pool then spins between the Adam steps while NumPy works. On a host
whose cores are busy (2 cores, one Dask worker of 2 threads, GPUOnly on its CPU) an update
took 226 ms that way and 13 ms on one thread (the quickstart's, 32 envs).

Example:
    >>> import torch
    >>> from workbench.algorithms.ppo import ActorCritic, PPOConfig
    >>> agent = ActorCritic(4, 2)
    >>> optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    >>> torch.set_num_threads(1)  # as in a workbench run (see _one_pool_spins)
    >>> step = NumpyStep.build(agent, optimizer, PPOConfig())
    >>> rng = np.random.default_rng(0)
    >>> batch = (rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 2, 8),
    ...          np.full(8, -0.69, np.float32), rng.normal(size=8).astype(np.float32),
    ...          rng.normal(size=8).astype(np.float32))
    >>> pg_loss, v_loss, entropy = step(batch, np.arange(8))
    >>> 0.69 < entropy < 0.70
    True
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch
from torch import nn

from workbench.algorithms.layers import Tanh

__all__ = ["NumpyStep", "MAX_ROWS", "one_torch_thread"]

#: minibatch rows up to which NumPy's step beats torch's here (above it the matmuls, not
#: the dispatch, are the cost, and torch's are faster)
MAX_ROWS = 4096


def _linears(seq: nn.Sequential) -> list[nn.Linear] | None:
    """The Linear layers of a Linear-Tanh-…-Linear stack, or None for any other shape."""
    if seq._forward_hooks or seq._forward_pre_hooks or len(seq) % 2 != 1:
        return None
    for i, layer in enumerate(seq):
        if layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks:
            return None
        want = (nn.Linear,) if i % 2 == 0 else (Tanh, nn.Tanh)
        if type(layer) not in want:
            return None
        if i % 2 == 0 and (
            layer.bias is None or layer.weight.dtype != torch.float32 or layer.weight.device.type != "cpu"
        ):
            return None
    return [seq[i] for i in range(0, len(seq), 2)]


def _one_pool_spins() -> bool:
    """Whether torch's and NumPy's BLAS thread pools cannot fight over the cores: torch on
    one thread (as workbench's inline runs set it) or BLAS on one (as Dask's nanny sets it
    in workers). With both pools at 2 threads on 2 cores, each spinning while the other
    works, one step took 15 ms instead of 0.4 (``benchmarks/ppo_sweep.py --throughput``)."""
    return torch.get_num_threads() == 1 or "1" in (
        os.environ.get("OPENBLAS_NUM_THREADS"),
        os.environ.get("OMP_NUM_THREADS"),
    )


@contextlib.contextmanager
def one_torch_thread():
    """torch's intra-op pool at one thread in this thread for the block (restored after;
    torch keeps the count per thread).

    >>> outside = torch.get_num_threads()
    >>> torch.set_num_threads(2)
    >>> with one_torch_thread():
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads()
    2
    >>> torch.set_num_threads(outside)
    """
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class NumpyStep:
    """One Adam step of PPO's loss on a minibatch, computed in NumPy (see the module)."""

    def __init__(self, agent, optimizer, cfg, actor, critic) -> None:
        self.agent, self.optimizer = agent, optimizer
        self.clip, self.ent_coef, self.vf_coef = float(cfg.clip_coef), float(cfg.ent_coef), float(cfg.vf_coef)
        self.max_grad_norm = cfg.max_grad_norm
        self.norm_adv = getattr(cfg, "norm_adv", True)
        self.params = [p for layer in actor + critic for p in (layer.weight, layer.bias)]
        self.flat = np.zeros(sum(p.numel() for p in self.params), np.float32)
        self.grads, offset = [], 0
        for p in self.params:
            self.grads.append(torch.from_numpy(self.flat[offset : offset + p.numel()]).view_as(p))
            offset += p.numel()
        # (weight, bias, weight grad, bias grad) per layer, all NumPy views
        self.actor = [self._views(layer) for layer in actor]
        self.critic = [self._views(layer) for layer in critic]

    def _views(self, layer: nn.Linear) -> tuple:
        i = next(k for k, p in enumerate(self.params) if p is layer.weight)
        return (
            layer.weight.detach().numpy(),
            layer.bias.detach().numpy(),
            self.grads[i].numpy(),
            self.grads[i + 1].numpy(),
        )

    @classmethod
    def build(cls, agent, optimizer, cfg) -> "NumpyStep | None":
        """The step for ``agent`` (cached on it while its layers, tensors and ``cfg``'s loss
        settings stay), or None where the torch path must run."""
        if getattr(cfg, "clip_vloss", False) or not getattr(agent, "fast_numpy_update", False):
            return None
        if not _one_pool_spins():
            return None
        actor, critic = _linears(agent.actor), _linears(agent.critic)
        if actor is None or critic is None or critic[-1].out_features != 1:
            return None
        trainable = [p for p in agent.parameters() if p.requires_grad]
        if len(trainable) != 2 * (len(actor) + len(critic)):
            return None  # a parameter the NumPy pass does not know of
        key = (
            optimizer,
            tuple(p.data_ptr() for p in trainable),
            cfg.clip_coef,
            cfg.ent_coef,
            cfg.vf_coef,
            cfg.max_grad_norm,
            getattr(cfg, "norm_adv", True),
        )
        cached = agent.__dict__.get("_numpy_update")
        if cached is not None and cached[0] == key:
            return cached[1]
        step = cls(agent, optimizer, cfg, actor, critic)
        agent.__dict__["_numpy_update"] = (key, step)
        return step

    # ------------------------------------------------------------------ forward, backward
    @staticmethod
    def _forward(layers: list, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        inputs = []  # each layer's input: x, then the tanh activations
        for k, (w, b, _, _) in enumerate(layers):
            inputs.append(x)
            x = x @ w.T
            x += b
            if k < len(layers) - 1:
                np.tanh(x, out=x)
        return x, inputs

    @staticmethod
    def _backward(layers: list, inputs: list, grad: np.ndarray) -> None:
        for k in range(len(layers) - 1, -1, -1):
            w, _, gw, gb = layers[k]
            h = inputs[k]
            np.matmul(grad.T, h, out=gw)
            grad.sum(0, out=gb)
            if k:
                grad = grad @ w
                grad *= 1 - h * h  # tanh' from its output

    def __call__(self, batch: tuple, mb: np.ndarray) -> tuple[float, float, float]:
        """Set ``p.grad`` to the gradient of PPO's loss on rows ``mb`` of ``batch`` (obs as
        the networks read them, action, old log-prob, advantage, return), clip it, and step
        the optimizer; returns (policy loss, value loss, mean entropy)."""
        obs, act, old_logp, adv, ret = (x[mb] for x in batch)
        n = len(mb)
        logits, actor_in = self._forward(self.actor, obs)
        value, critic_in = self._forward(self.critic, obs)
        value = value[:, 0]

        logits -= logits.max(1, keepdims=True)
        logp_all = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        p = np.exp(logp_all)
        rows = np.arange(n)
        new_logp = logp_all[rows, act]
        entropy = -(p * logp_all).sum(1)
        ratio = np.exp(new_logp - old_logp)
        if self.norm_adv:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        surrogate = -adv * ratio
        clipped = -adv * np.clip(ratio, 1 - self.clip, 1 + self.clip)
        pg_loss = np.maximum(surrogate, clipped).mean()
        err = value - ret
        v_loss = 0.5 * (err * err).mean()

        # d loss / d logits: the surrogate through log p(action), and the entropy bonus
        g_logp = np.where(surrogate >= clipped, -adv * ratio, 0).astype(np.float32) / n
        g_logits = p * (-g_logp)[:, None]
        g_logits[rows, act] += g_logp
        if self.ent_coef:
            g_logits += (self.ent_coef / n) * p * (logp_all + entropy[:, None])
        g_value = (self.vf_coef / n) * err
        self._backward(self.actor, actor_in, g_logits.astype(np.float32, copy=False))
        self._backward(self.critic, critic_in, g_value[:, None].astype(np.float32, copy=False))

        if self.max_grad_norm:  # as ppo._sync_and_clip, for one learner
            norm = float(np.sqrt(np.dot(self.flat, self.flat)))
            self.flat *= min(1.0, self.max_grad_norm / (norm + 1e-6))
        for p_, g in zip(self.params, self.grads):
            if p_.grad is not g:  # the torch path's zero_grad set it to None
                p_.grad = g
        self.optimizer.step()
        return float(pg_loss), float(v_loss), float(entropy.mean())
