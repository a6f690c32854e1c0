"""CUDA graphs for any algorithm: capture a function of tensors once, replay it from one
launch; the pieces PPO's (`workbench.algorithms.ppo_graphs`) and GRPO's (`workbench.llm`)
graphs share, so they live below both (workbench/layers.py).

Why: on a GPU a small network's time goes to launching kernels, not running them (~10–30 µs
of CPU a torch op on the H100/H200 hosts; a forward of a 12-layer transformer is ~900 ops).
A graph replays the same kernels on the same buffers, so a replay computes what the eager
call computes from the same inputs.

The rules every user of this module follows: the captured function reads only its static
input tensors, the module's parameters and buffers that it updates in place (a model whose
weights are *loaded* into it keeps its graphs; a model *replaced* gets new ones), and it
must not wait on the device (no ``.item()``, ``bool(tensor)``, host copies). The first
``warmup`` calls of a shape run eagerly (cuBLAS handles, the allocator, lazily built
state); a capture that fails falls back to the eager call for good, with one warning.

Example (on a GPU)::

    out = graphed_call(model, "score", lambda x: (model(x),), (x,))   # a tuple, or None: run eagerly
"""

from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["Slot", "slot_for", "capture", "give_up", "graphed_call", "captured_graphs", "CapturableAdam", "WARMUP"]

#: eager calls of a shape before its capture (cuBLAS handles, the caching allocator)
WARMUP = 2
_CALLS: "weakref.WeakKeyDictionary[Any, dict[str, Slot]]" = weakref.WeakKeyDictionary()


@dataclass
class Slot:
    """One captured function: what it was captured for (``key``), how often it was called,
    its graph and static buffers, and whether capturing it failed for good."""

    key: Any = None
    calls: int = 0
    graph: Any = None
    inputs: tuple = ()
    outputs: tuple = ()
    extra: dict = field(default_factory=dict)
    failed: bool = False


def slot_for(cache, owner, key) -> Slot:
    """``owner``'s slot in ``cache``; a new one when ``key`` changed (unless capturing failed
    for good: then it stays failed, whatever the shape)."""
    slot = cache.get(owner)
    if slot is None or (slot.key != key and not slot.failed):
        slot = cache[owner] = Slot(key=key)
    return slot


#: a capture stream per GPU: torch's default is one per process, made on whichever GPU was
#: current first, and a capture on another GPU's stream records nothing (pytorch#87894)
_CAPTURE_STREAMS: dict[torch.device, Any] = {}
#: one capture at a time in a process (replica threads of one worker share its GPUs' streams)
_CAPTURING = threading.RLock()


def capture(fn: Callable[[], tuple], device) -> tuple[Any, tuple]:
    """``fn()`` recorded (not run) into a new graph on ``device`` (where its tensors are);
    returns the graph and ``fn``'s outputs, the buffers each replay overwrites."""
    device = torch.device(device)  # a tensor's: its index is set
    graph = torch.cuda.CUDAGraph()
    with _CAPTURING, torch.cuda.device(device):
        stream = _CAPTURE_STREAMS.get(device)
        if stream is None:
            stream = _CAPTURE_STREAMS[device] = torch.cuda.Stream(device)
        before = torch.cuda.current_stream(device)
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = fn()
        finally:  # a capture that raised leaves the thread on the capture stream (torch skips its exit)
            torch.cuda.set_stream(before)
    return graph, outputs


def give_up(slot: Slot, what: str, exc: BaseException) -> None:
    """Mark ``slot`` failed for good and say why, once."""
    slot.failed, slot.graph = True, None
    warnings.warn(
        f"workbench: {what} runs without a CUDA graph from now on (capturing it failed: "
        f"{type(exc).__name__}: {str(exc)[:200]}); results are the same, only slower.",
        RuntimeWarning,
        stacklevel=3,
    )


def graphed_call(
    owner, name: str, fn: Callable[..., tuple], inputs: tuple[torch.Tensor, ...], warmup: int = WARMUP
) -> tuple | None:
    """``fn(*inputs)`` — a tuple of tensors — replayed from a graph captured for the inputs'
    shapes; None while warming up or where capturing failed (the caller then runs ``fn``
    eagerly itself). ``owner`` (a model) holds one slot per ``name``; a new shape under a
    name captures again. The outputs are fresh tensors: the next replay overwrites the
    graph's own."""
    slots = _CALLS.setdefault(owner, {})
    key = tuple((tuple(x.shape), x.dtype, x.device) for x in inputs)
    slot = slot_for(slots, name, key)
    if slot.failed:
        return None
    slot.calls += 1
    if slot.graph is None:
        if slot.calls <= warmup:
            return None
        try:
            static = tuple(x.clone() for x in inputs)
            torch.cuda.synchronize(inputs[0].device)
            slot.graph, slot.outputs = capture(lambda: fn(*static), inputs[0].device)
            slot.inputs = static
        except Exception as exc:  # noqa: BLE001  (eager is always right; say why once)
            give_up(slot, f"{name} of {type(owner).__name__}", exc)
            return None
    for dst, src in zip(slot.inputs, inputs):
        dst.copy_(src)
    slot.graph.replay()
    return tuple(out.clone() for out in slot.outputs)


def captured_graphs(owner) -> int:
    """How many of ``owner``'s :func:`graphed_call` functions replay a graph now (0 on the
    CPU, while warming up, or where capturing failed): what a run logs to show the graphs
    are in use."""
    return sum(slot.graph is not None for slot in _CALLS.get(owner, {}).values())


class CapturableAdam:
    """Adam made graph-safe for an update: ``capturable`` on, its rate the device scalar
    ``lr`` (filled from the float the schedule or the config set); both restored
    afterwards, so the optimizer's state_dict and any eager step look as before."""

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
