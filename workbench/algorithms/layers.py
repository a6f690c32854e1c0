"""Layers of PPO's network that are faster or more faithful than torch's stock ones here.

- `tanh` / `Tanh`: torch's tanh on a GPU; on the CPU the same function computed as
  ``2·σ(2x) − 1`` (torch's CPU tanh is 3-4× slower than its sigmoid on this project's
  hosts);
- `ObsNorm`: observation normalisation whose statistics are buffers of the network, so they
  travel with the weights to every actor replica.

Example:
    >>> import torch
    >>> norm = ObsNorm(1)
    >>> norm.update(torch.tensor([[2.0], [4.0]]))
    >>> norm(torch.tensor([[3.0]])).item()
    0.0
"""

from __future__ import annotations

import torch
from torch import nn

import workbench as wb

__all__ = ["tanh", "Tanh", "ObsNorm"]


class _SigmoidTanh(torch.autograd.Function):
    """tanh as ``2·σ(2x) − 1`` with tanh's own backward (``grad · (1 − y²)``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


#: element counts for which ``2·σ(2x) − 1`` beats torch's CPU tanh (measured, 1 thread:
#: 6,144 elements 14 µs against 17; 196,608: 143 against 506; 262,144: 921 against 671)
SIGMOID_BAND = (6_144, 196_608)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh(x)`` on a GPU; on the CPU the same function as ``2·σ(2x) − 1`` (within
    2e-7 of it), because torch's CPU tanh goes to MKL's VML, which on this project's AMD
    EPYC host takes 3-4× as long as torch's own sigmoid: at 1,024 envs it was a quarter of
    the actor's and the learner's time (``benchmarks/ppo_sweep.py --throughput``). Only for
    tensors of `SIGMOID_BAND` elements: below it the three ops' dispatch costs more than
    VML (4×64: 10 µs against 2), above it the two temporaries' allocations do.

    >>> x = torch.linspace(-6, 6, 10_001)
    >>> bool((tanh(x) - torch.tanh(x)).abs().max() < 3e-7)
    True
    """
    if x.device.type != "cpu" or not SIGMOID_BAND[0] <= x.numel() <= SIGMOID_BAND[1]:
        return torch.tanh(x)
    if x.requires_grad and torch.is_grad_enabled():
        return _SigmoidTanh.apply(x)
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


class Tanh(nn.Tanh):
    """``nn.Tanh`` computed by `tanh` (the same function, faster on the CPU)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh(x)


class ObsNorm(nn.Module):
    """``obs → clip((obs − mean) / sqrt(var + 1e-8), ±10)`` with the running mean and
    variance of every observation the learner learned from (SB3's ``VecNormalize``,
    CleanRL's ``NormalizeObservation``).

    The statistics are buffers of the network, so they travel with ``weights``: every actor
    replica normalises as the learner does, whatever the placement. The learner adds each
    iteration's rollout *before* its epochs (`update`), so the epochs optimise the policy
    the actors will run next, statistics included. (Added after the epochs instead, the
    actors would run weights fitted to older statistics: that needed ~2× the env steps to
    solve CartPole in ``benchmarks/ppo_sweep.py``.) The rollout's log-probabilities stay
    those the actor drew under the older statistics, as the data were collected. Kept in
    float64 (``mean``, ``var``, ``count``); the forward pass reads their float32 form
    (``shift``, ``scale``).
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("shift", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.shift) * self.scale).clamp_(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Add a batch ``[B, dim]`` (Chan et al.'s parallel update, as gymnasium's
        ``RunningMeanStd``). Learner replicas average their batches' moments
        (`wb.allreduce`, equal batches), so all of them keep the same statistics.

        >>> norm = ObsNorm(2)
        >>> norm.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
        >>> norm.mean.tolist(), [round(v, 3) for v in norm.var.tolist()]
        ([2.0, 20.0], [1.0, 100.0])
        """
        x = obs.reshape(-1, obs.shape[-1])
        moments = wb.allreduce(torch.cat([x.mean(0), (x * x).mean(0)])).to(torch.float64)
        batch_mean, batch_sq = moments.chunk(2)
        batch_var = (batch_sq - batch_mean * batch_mean).clamp_(min=0)
        n, total = float(x.shape[0]), self.count + x.shape[0]
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * (n / total)
        new_var = (self.var * self.count + batch_var * n + delta * delta * (self.count * n / total)) / total
        self.mean.copy_(new_mean)
        self.var.copy_(new_var)
        self.count.copy_(total)
        self.shift.copy_(new_mean)
        self.scale.copy_(torch.rsqrt(new_var + self.eps))
