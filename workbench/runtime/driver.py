"""The driver: walks a plan's task stream, wires each task's inputs to the outputs of the
tasks that produce them, and reports each iteration as it completes.

It talks to a :class:`Backend` — :class:`InlineBackend` here (the calling process), a Dask
backend in ``workbench.cluster`` — so the routing logic is the same for every policy.
The driver only ever holds *references* to outputs (futures on a cluster): bulk data moves
between workers, and the notebook receives the small :class:`TaskReport`s.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from workbench.fdg.errors import PlacementError
from workbench.fdg.plan import Plan, TaskSpec
from workbench.runtime.replica import GroupProgram, GroupReplica, TaskReport

__all__ = ["Backend", "InlineBackend", "IterationRecord", "drive"]


class Backend(Protocol):
    """Where replicas live and tasks run."""

    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any]) -> None: ...

    def submit(self, spec: TaskSpec, replica: int, inputs: dict, emit_keys: tuple[str, ...]) -> Any: ...

    def report(self, ref: Any) -> TaskReport:
        """Block until the task is done; raise its error if it failed."""

    def cancel(self) -> None:
        """Cancel every task not yet finished."""

    def teardown(self) -> None:
        """Drop the replicas' state (envs closed, memory freed)."""


@dataclass
class IterationRecord:
    """Everything the notebook learns about one finished iteration."""

    iteration: int
    env_steps: int = 0
    metrics: dict[str, list[float]] = field(default_factory=dict)
    compute_seconds: dict[str, float] = field(default_factory=dict)

    def absorb(self, report: TaskReport) -> None:
        for name, values in report.metrics.get(self.iteration, {}).items():
            self.metrics.setdefault(name, []).extend(values)
        self.env_steps += report.env_steps.get(self.iteration, 0)


class InlineBackend:
    """Runs every replica in the calling process, synchronously."""

    def __init__(self) -> None:
        self.replicas: dict[tuple[str, int], GroupReplica] = {}

    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any]) -> None:
        for name, group in plan.groups.items():
            for index in range(group.replicas):
                self.replicas[(name, index)] = GroupReplica(
                    programs[name], index, group.replicas, "local", notebook, group.device)

    def submit(self, spec: TaskSpec, replica: int, inputs: dict, emit_keys: tuple[str, ...]):
        resolved = {k: (s, a, [ref[0] for ref in refs]) for k, (s, a, refs) in inputs.items()}
        return self.replicas[(spec.group, replica)].run(spec.items, resolved, emit_keys)

    def report(self, ref) -> TaskReport:
        return ref[1]

    def cancel(self) -> None:
        pass

    def teardown(self) -> None:
        for replica in self.replicas.values():
            for ns in replica.namespaces.values():
                _close_envs(ns)
        self.replicas.clear()


def _close_envs(ns: dict) -> None:
    for value in list(ns.values()):
        close = getattr(value, "close", None)
        if callable(close) and hasattr(value, "step") and hasattr(value, "reset"):
            try:
                close()
            except Exception:  # closing is best effort; the run already has its result
                pass


def drive(
    plan: Plan,
    backend: Backend,
    iterations: int,
    on_iteration: Callable[[IterationRecord], bool],
    *,
    start: int = 0,
    with_init: bool = True,
    lookahead: int = 1,
) -> int:
    """Run ``iterations`` iterations. ``on_iteration`` is called with each finished
    iteration in order and returns True to stop early. Returns the iterations completed.

    ``lookahead`` iterations may be submitted before the current one has finished, so
    workers never wait on the notebook.
    """
    latest: dict[str, list[Any]] = {}
    outstanding: dict[int, int] = {}
    records: dict[int, IterationRecord] = {}
    queue: deque[tuple[TaskSpec, list[Any]]] = deque()
    done_through = start - 1

    def settle_one() -> bool:
        nonlocal done_through
        spec, refs = queue.popleft()
        for ref in refs:
            report = backend.report(ref)
            for it in _iterations_of(spec):
                records.setdefault(it, IterationRecord(it)).absorb(report)
            if spec.iteration is not None:  # compute time counts toward the task's last iteration
                rec = records[spec.iteration]
                for frag, seconds in report.compute_seconds.items():
                    rec.compute_seconds[frag] = rec.compute_seconds.get(frag, 0.0) + seconds
        for it in _iterations_of(spec):
            outstanding[it] -= 1
        while outstanding.get(done_through + 1, 1) == 0:
            done_through += 1
            if on_iteration(records.pop(done_through)):
                return True
        return False

    try:
        for spec in plan.tasks(iterations, start, with_init=with_init):
            group = plan.groups[spec.group]
            emits = _emit_keys(plan, spec)
            refs = [
                backend.submit(spec, r, _inputs_for(plan, spec, r, latest), emits)
                for r in range(group.replicas)
            ]
            for key in emits:
                latest[key] = refs
            for it in _iterations_of(spec):
                outstanding[it] = outstanding.get(it, 0) + 1
            queue.append((spec, refs))
            newest = _position(spec, start)
            while queue and _position(queue[0][0], start) < newest - lookahead:
                if settle_one():
                    backend.cancel()
                    return done_through - start + 1
        while queue:
            if settle_one():
                backend.cancel()
                break
    except BaseException:
        backend.cancel()
        raise
    return done_through - start + 1


def _position(spec: TaskSpec, start: int) -> int:
    """Where a task sits in the loop; init tasks come just before the first iteration."""
    return spec.iteration if spec.iteration is not None else start - 1


def _iterations_of(spec: TaskSpec) -> list[int]:
    return sorted({i.iteration for i in spec.items if i.iteration is not None})


def _emit_keys(plan: Plan, spec: TaskSpec) -> tuple[str, ...]:
    keys = []
    for route in plan.routes_out_of(spec.group):
        edge = route.interface
        for item in spec.items:
            if edge.producer not in item.fragments:
                continue
            if (edge.timing == "stacked" and item.rate == "step") or (
                edge.timing != "stacked" and item.rate in edge.producer_rates
            ):
                keys.append(route.key)
    return tuple(dict.fromkeys(keys))


def _inputs_for(plan: Plan, spec: TaskSpec, replica: int, latest: dict) -> dict:
    inputs = {}
    for route in plan.routes_into(spec.group):
        edge = route.interface
        needed = any(edge.consumer in item.fragments and item.rate == edge.consumer_rate
                     for item in spec.items)
        if not needed or route.key in inputs:
            continue
        refs = latest.get(route.key)
        if refs is None:
            raise PlacementError(
                f"{edge.describe()}: {edge.consumer!r} needs {edge.name!r} before "
                f"{edge.producer!r} has produced it. Give it a first value in "
                f"{edge.producer!r}'s --init cell."
            )
        if route.spatial == "one-to-one":
            chosen = [refs[replica]]
        elif route.spatial == "gather":
            chosen = list(refs)
        else:
            chosen = [refs[0]]
        inputs[route.key] = (route.spatial, route.batch_axis, chosen)
    return inputs
