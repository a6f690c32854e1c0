"""Adam for a CPU learner without torch.optim's one-second first use.

``torch.optim.Optimizer.__init__`` (through ``add_param_group``) and every ``Adam.step``
import ``torch._dynamo`` — the compiler, ~1.0 s of imports on the 2-core dev machine the
first time a process does it. A PPO run on CartPole solves in ~1 s after that, so the import
was half of the training time to solve, in every process (the notebook's, each Dask
worker's). :class:`FusedAdam` is ``torch.optim.Adam(fused=True)`` — the same fused kernel
(``torch._fused_adam_``), the same state (``step``, ``exp_avg``, ``exp_avg_sq`` per
parameter) and the same ``state_dict`` layout, so checkpoints load into either — without
going through the methods that import the compiler. It is a ``torch.optim.Optimizer``
(learning-rate schedulers and checkpoints treat it as one) that sets itself up instead of
calling ``Optimizer.__init__``.

:func:`adam` picks it for a CPU learner and ``torch.optim.Adam`` elsewhere (on a GPU the PPO
update replays as a CUDA graph, which makes torch's Adam capturable: `ppo_graphs`).

Example:
    >>> import torch
    >>> net = torch.nn.Linear(3, 1)
    >>> opt = FusedAdam(net.parameters(), lr=1e-2, eps=1e-5)
    >>> net(torch.ones(2, 3)).sum().backward()
    >>> opt.step()
    >>> sorted(opt.state_dict()["state"][0])
    ['exp_avg', 'exp_avg_sq', 'step']
    >>> isinstance(opt, torch.optim.Optimizer)
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections import OrderedDict
from typing import Any, Iterable

import torch

__all__ = ["FusedAdam", "adam"]


def adam(params: Iterable[torch.Tensor], lr: float, eps: float = 1e-5, device: Any = "cpu") -> torch.optim.Optimizer:
    """Adam for a learner on ``device``: :class:`FusedAdam` on the CPU (no compiler import,
    the fused kernel), ``torch.optim.Adam`` on other devices.

    >>> type(adam(torch.nn.Linear(2, 1).parameters(), 3e-4)).__name__
    'FusedAdam'
    """
    if torch.device(device).type == "cpu":
        return FusedAdam(params, lr=lr, eps=eps)
    return torch.optim.Adam(params, lr=lr, eps=eps)


class FusedAdam(torch.optim.Optimizer):
    """``torch.optim.Adam(params, lr, betas, eps, fused=True)``, numbers and state alike,
    without importing ``torch._dynamo`` (see the module's doc). One or more parameter groups
    (an iterable of tensors, or of dicts as torch takes them); no amsgrad, weight decay,
    maximize or gradient scaling — those are torch's Adam's."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        if not lr >= 0.0 or not eps >= 0.0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(
                f"FusedAdam needs lr ≥ 0, eps ≥ 0 and betas in [0, 1); got lr={lr}, eps={eps}, betas={betas}."
            )
        # what Optimizer.__init__ sets, minus the dynamo-wrapped add_param_group: torch's own
        # methods that FusedAdam does not replace (__repr__, hooks, schedulers) read these
        self.defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": 0,
            "amsgrad": False,
            "maximize": False,
            "foreach": None,
            "capturable": False,
            "differentiable": False,
            "fused": True,
            "decoupled_weight_decay": False,
        }
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self.state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        params = list(params)
        if not params:
            raise ValueError("FusedAdam got an empty parameter list.")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, torch.Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, torch.Tensor) or not p.is_leaf:
                raise ValueError(f"FusedAdam optimizes leaf tensors (a module's parameters()), not {type(p).__name__}.")
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group.")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self, closure=None):
        """One Adam step for every parameter with a gradient (``closure`` as torch's)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:  # as torch's Adam: a float32 step counter on the CPU for a CPU param
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
        return loss

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: parameters by their index across the groups, in order."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict`` of this class or of ``torch.optim.Adam`` (same layout)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
            len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups, self.param_groups)
        ):
            raise ValueError(
                f"the saved optimizer state has {[len(s['params']) for s in saved_groups]} parameters per "
                f"group, this optimizer {[len(g['params']) for g in self.param_groups]}: it belongs to "
                "another network."
            )
        by_index = {i: p for s, g in zip(saved_groups, self.param_groups) for i, p in zip(s["params"], g["params"])}
        state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        for i, saved in state_dict["state"].items():
            p = by_index[int(i)]
            state[p] = {
                k: (
                    v.to(dtype=torch.float32, device=p.device) if k == "step" else v.to(dtype=p.dtype, device=p.device)
                ).clone()
                for k, v in saved.items()
            }
        self.state = state
        for saved, group in zip(saved_groups, self.param_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = value
