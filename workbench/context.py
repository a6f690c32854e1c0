"""What fragment code can ask of the runtime: who am I, log a metric, all-reduce.

Fragment cells run with a ``replica`` object in their namespace and may call
``wb.log`` and ``wb.allreduce``; outside a run these work too (logging goes nowhere,
all-reduce is the identity), so the same functions run in a plain script.

Example (inside a fragment cell):
    >>> import workbench as wb
    >>> wb.log("charts/episodic_return", 17.0)      # no run active: ignored
    >>> wb.allreduce(3.0)                           # one replica: the identity
    3.0
"""
from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplicaInfo", "ReplicaContext", "log", "allreduce", "current"]


@dataclass(frozen=True)
class ReplicaInfo:
    """The ``replica`` name in every fragment namespace: which copy this is, and where.

    ``index`` is in ``range(count)``; ``worker`` is the Dask worker name (``"local"`` in
    the calling process); ``device`` is ``"cpu"`` or ``"cuda:K"``.
    """

    fragment: str
    index: int = 0
    count: int = 1
    worker: str = "local"
    device: str = "cpu"


@dataclass
class ReplicaContext:
    """Per-task state the runtime keeps while a replica's cells run."""

    info: ReplicaInfo
    iteration: int | None = None
    #: iteration → metric name → values logged
    metrics: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    #: how ``allreduce`` combines values across learner replicas (identity by default)
    reducer: Callable[[Any], Any] | None = None

    def record(self, name: str, value: Any) -> None:
        bucket = self.metrics.setdefault(self.iteration if self.iteration is not None else -1, {})
        bucket.setdefault(name, []).extend(_as_floats(value))


_current: contextvars.ContextVar[ReplicaContext | None] = contextvars.ContextVar(
    "workbench_replica", default=None
)


def current() -> ReplicaContext | None:
    """The running replica's context, or None outside a run."""
    return _current.get()


def activate(ctx: ReplicaContext | None) -> contextvars.Token:
    return _current.set(ctx)


def deactivate(token: contextvars.Token) -> None:
    _current.reset(token)


def log(name: str, value: Any) -> None:
    """Record a metric for this iteration: a number, or an array of numbers (each kept).

    Use flat names such as ``charts/episodic_return`` or ``losses/policy_loss``.
    """
    ctx = _current.get()
    if ctx is not None:
        ctx.record(name, value)


def allreduce(value: Any) -> Any:
    """Mark a gradient (or any tensor) sync point: averaged across this fragment's
    replicas when there are several, returned unchanged when there is one."""
    ctx = _current.get()
    if ctx is None or ctx.reducer is None:
        return value
    return ctx.reducer(value)


def _as_floats(value: Any) -> list[float]:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        out: list[float] = []
        for v in value:
            out.extend(_as_floats(v))
        return out
    return [float(value)]
