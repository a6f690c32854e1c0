"""PPO on a GPU through CUDA graphs: the actor's sampling step, and a whole iteration's
minibatch epochs, each replayed as one graph.

Why: on a GPU the quickstart's networks are tiny, so the time goes to launching kernels,
not running them. Measured on the H100 host (4,096 envs, 16 steps, 2 epochs × 8
minibatches): one iteration's update launched ~1,700 kernels taking 5 ms of GPU time and
50 ms of CPU time (~30 µs per torch op there); ``act`` took 0.9 ms for 0.07 ms of GPU work.
A graph replays the same kernels from one launch.

What stays the same: the arithmetic (the same ops on the same buffers), the minibatch
order (drawn each iteration on the GPU's generator, as the eager GPU path does), the
learning-rate schedule (the rate is a device scalar the graph reads, refilled each
iteration). What is captured is the work for one shape and one set of the update's
constants (epochs, minibatches, clip, coefficients): a change of either (``%fdg update
cfg.clip_coef …``) captures again. The actor's first two calls run eagerly (warming up
cuBLAS and the allocator); the update's first one does (Adam's state), and is captured right
after it: an eager update at 4,096 envs takes ~115 ms on an H100 against ~11 ms replayed,
and every run pays its warm-up before it can solve. An update capture that fails is tried
again after the next eager update, up to `UPDATE_TRIES` times; one that fails for good falls
back to the eager path, with one warning saying why. Only a single learner is graphed (an
all-reduce across learners waits on the network, which no graph can hold).

Example (on a GPU)::

    out = graphed_act(policy.actor, policy.critic, x)   # (action, logp, value) or None
"""
from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["graphed_act", "graphed_update", "WARMUP", "UPDATE_WARMUP", "UPDATE_TRIES"]

#: the actor's eager calls before its capture (cuBLAS handles, the caching allocator)
WARMUP = 2
#: eager updates before the update's capture (Adam's lazy state needs one step)
UPDATE_WARMUP = 1
#: the eager update after which a capture that keeps failing is given up
UPDATE_TRIES = 3
_ACT: "weakref.WeakKeyDictionary[Any, _Slot]" = weakref.WeakKeyDictionary()
_UPDATE: "weakref.WeakKeyDictionary[Any, _Slot]" = weakref.WeakKeyDictionary()


@dataclass
class _Slot:
    key: Any = None
    calls: int = 0
    graph: Any = None
    inputs: tuple = ()
    outputs: tuple = ()
    extra: dict = field(default_factory=dict)
    failed: bool = False


def _slot(cache, owner, key) -> _Slot:
    slot = cache.get(owner)
    if slot is None or (slot.key != key and not slot.failed):
        slot = cache[owner] = _Slot(key=key)
    return slot


def _capture(fn: Callable[[], tuple]) -> tuple[Any, tuple]:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = fn()
    return graph, outputs


def _give_up(slot: _Slot, what: str, exc: BaseException) -> None:
    slot.failed, slot.graph = True, None
    warnings.warn(f"workbench: {what} runs without a CUDA graph from now on (capturing it failed: "
                  f"{type(exc).__name__}: {str(exc)[:200]}); results are the same, only slower.",
                  RuntimeWarning, stacklevel=3)


# ----------------------------------------------------------------------------- acting
def graphed_act(net, sample: Callable[[Any, torch.Tensor], tuple], x: torch.Tensor) -> tuple | None:
    """``sample(net, x)`` — (action, logp, value) tensors — replayed from a graph captured
    for ``x``'s shape; None while warming up or where capturing failed (then the caller
    runs eagerly). The outputs are fresh tensors (a replay overwrites the graph's own)."""
    slot = _slot(_ACT, net, (tuple(x.shape), x.dtype, x.device))
    if slot.failed:
        return None
    slot.calls += 1
    if slot.graph is None:
        if slot.calls <= WARMUP:
            return None
        try:
            static_x = x.clone()
            torch.cuda.synchronize(x.device)
            slot.graph, slot.outputs = _capture(lambda: sample(net, static_x))
            slot.inputs = (static_x,)
        except Exception as exc:  # noqa: BLE001  (eager is always right; say why once)
            _give_up(slot, "the actor's sampling step", exc)
            return None
    slot.inputs[0].copy_(x)
    slot.graph.replay()
    return tuple(out.clone() for out in slot.outputs)


# ----------------------------------------------------------------------------- learning
def graphed_update(agent, optimizer, key: tuple, batch: tuple[torch.Tensor, ...], epochs: int,
                   mb_size: int, step: Callable[[torch.Tensor, tuple], tuple]) -> tuple | None:
    """All of an iteration's minibatch steps — ``step(idx, batch)`` for each minibatch of
    each epoch's permutation — replayed from one graph; returns the last step's outputs, or
    None where the caller must run eagerly (a capture that failed). ``key`` holds what the
    captured work depends on besides shapes (the update's constants)."""
    size = batch[0].shape[0]
    device = batch[0].device
    if len(optimizer.param_groups) != 1:  # one rate scalar serves one group
        return None
    slot = _slot(_UPDATE, agent, (key, tuple((t.shape, t.dtype) for t in batch), epochs, mb_size, id(optimizer)))
    if slot.failed:
        return None
    slot.calls += 1
    try:
        if not slot.inputs:
            slot.inputs = tuple(torch.empty_like(t) for t in batch)
            slot.extra["orders"] = torch.empty((epochs, size), dtype=torch.long, device=device)
            slot.extra["lr"] = torch.zeros((), device=device)
        static, orders = slot.inputs, slot.extra["orders"]
        for dst, src in zip(static, batch):
            dst.copy_(src)
        for e in range(epochs):
            orders[e].copy_(torch.randperm(size, device=device))

        def every_step() -> tuple:
            out = ()
            for e in range(epochs):
                for start in range(0, size, mb_size):
                    out = step(orders[e, start:start + mb_size], static)
            return out

        with _capturable(optimizer, slot.extra["lr"]):
            if slot.graph is not None:
                slot.graph.replay()
                return slot.outputs
            # the first calls: real updates, on a side stream as capturing wants
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                out = every_step()
            torch.cuda.current_stream(device).wait_stream(side)
    except Exception as exc:  # noqa: BLE001  (Adam refused to be capturable: nothing applied yet)
        _give_up(slot, "the PPO update", exc)
        return None
    if slot.calls >= UPDATE_WARMUP:
        try:
            with _capturable(optimizer, slot.extra["lr"]):
                optimizer.zero_grad(set_to_none=True)  # the graph allocates the grads itself
                torch.cuda.synchronize(device)
                slot.graph, slot.outputs = _capture(every_step)  # recorded, not run
        except Exception as exc:  # noqa: BLE001  (this iteration's update is done: keep it)
            slot.graph, slot.outputs = None, ()
            if slot.calls >= UPDATE_TRIES:
                _give_up(slot, "the PPO update", exc)
    return out


class _capturable:
    """Adam made graph-safe for the update: ``capturable`` on, its rate the device scalar
    ``lr`` (filled from the float the schedule set); both restored afterwards, so the
    optimizer's state_dict and any eager step look as before."""

    def __init__(self, optimizer, lr: torch.Tensor) -> None:
        self.optimizer, self.lr = optimizer, lr

    def __enter__(self):
        self.saved = [(g.get("capturable", False), g["lr"]) for g in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            self.lr.fill_(float(group["lr"]))
            group["capturable"], group["lr"] = True, self.lr
            for p in group["params"]:  # Adam's step counters on the device, as capturable wants
                state = self.optimizer.state.get(p)
                if state and "step" in state and state["step"].device != p.device:
                    state["step"] = state["step"].to(p.device)
        return self

    def __exit__(self, *exc) -> None:
        for group, (capturable, lr) in zip(self.optimizer.param_groups, self.saved):
            group["capturable"], group["lr"] = capturable, lr
