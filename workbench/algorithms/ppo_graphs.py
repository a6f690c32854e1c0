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

import weakref
from typing import Any, Callable

import torch

from workbench.kernels.cuda_graphs import WARMUP, CapturableAdam, Slot, capture, give_up, graphed_call, slot_for

__all__ = ["graphed_act", "graphed_update", "update_captured", "WARMUP", "UPDATE_WARMUP", "UPDATE_TRIES"]

#: eager updates before the update's capture (Adam's lazy state needs one step)
UPDATE_WARMUP = 1
#: the eager update after which a capture that keeps failing is given up
UPDATE_TRIES = 3
_UPDATE: "weakref.WeakKeyDictionary[Any, Slot]" = weakref.WeakKeyDictionary()


# ----------------------------------------------------------------------------- acting
def graphed_act(net, sample: Callable[[Any, torch.Tensor], tuple], x: torch.Tensor) -> tuple | None:
    """``sample(net, x)`` — (action, logp, value) tensors — replayed from a graph captured
    for ``x``'s shape; None while warming up or where capturing failed (then the caller
    runs eagerly). The outputs are fresh tensors (a replay overwrites the graph's own)."""
    return graphed_call(net, "the actor's sampling step", lambda x: sample(net, x), (x,))


# ----------------------------------------------------------------------------- learning
def graphed_update(
    agent,
    optimizer,
    key: tuple,
    batch: tuple[torch.Tensor, ...],
    epochs: int,
    slices: list[slice],
    step: Callable[[torch.Tensor, tuple], tuple],
    *,
    shuffle: bool = True,
    what: str = "the PPO update",
) -> tuple | None:
    """All of an iteration's minibatch steps — ``step(idx, batch)`` for each minibatch of
    each epoch's permutation — replayed from one graph; returns the last step's outputs, or
    None where the caller must run eagerly (a capture that failed). ``key`` holds what the
    captured work depends on besides shapes (the update's constants). ``shuffle=False``
    draws no permutation (``idx`` is then ``arange``: a step that needs the batch's order,
    as GRPO's groups do, reads ``batch`` whole); ``what`` names the update in the warning."""
    size = batch[0].shape[0]
    device = batch[0].device
    if len(optimizer.param_groups) != 1:  # one rate scalar serves one group
        return None
    slot = slot_for(
        _UPDATE,
        agent,
        (
            key,
            tuple((t.shape, t.dtype) for t in batch),
            epochs,
            tuple((s.start, s.stop) for s in slices),
            id(optimizer),
        ),
    )
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
        for e in range(epochs):  # unshuffled: drawn once, so the device generator is left alone
            if shuffle:
                orders[e].copy_(torch.randperm(size, device=device))
            elif slot.calls == 1:
                orders[e].copy_(torch.arange(size, device=device))

        def every_step() -> tuple:
            out = ()
            for e in range(epochs):
                for mb in slices:
                    out = step(orders[e, mb], static)
            return out

        with CapturableAdam(optimizer, slot.extra["lr"]):
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
        give_up(slot, what, exc)
        return None
    if slot.calls >= UPDATE_WARMUP:
        try:
            with CapturableAdam(optimizer, slot.extra["lr"]):
                optimizer.zero_grad(set_to_none=True)  # the graph allocates the grads itself
                torch.cuda.synchronize(device)
                slot.graph, slot.outputs = capture(every_step, device)  # recorded, not run
        except Exception as exc:  # noqa: BLE001  (this iteration's update is done: keep it)
            slot.graph, slot.outputs = None, ()
            if slot.calls >= UPDATE_TRIES:
                give_up(slot, what, exc)
    return out


def update_captured(agent) -> bool:
    """Whether ``agent``'s update is captured (its next update replays the graph)."""
    slot = _UPDATE.get(agent)
    return slot is not None and slot.graph is not None
