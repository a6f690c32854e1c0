"""The FDG generator: Graph + policy → a plan of what runs where and how names travel.

A plan is pure data. It lists, per group of fused fragments, the *items* a replica runs
(an init or iteration cell run, or a block of ``T`` steps), and for every interface that
crosses groups a :class:`Route` with its spatial behaviour (gather, broadcast, one-to-one).
:meth:`Plan.tasks` turns the loop into a stream of :class:`TaskSpec` — chunks of work that
an executor runs, inline or as Dask tasks — each holding at most one block of steps, so
per-step work never becomes one task per step.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.policy import Inline
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "action = obs + 1", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = action", rate="step")
    >>> plan = make_plan(fdg, Inline().place(fdg))
    >>> [t.describe() for t in plan.tasks(iterations=1)]
    ['env+actor: init env · steps actor, env (iteration 0)']
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph, Schedule
from workbench.fdg.interface import Interface, spatial_kind
from workbench.fdg.policy import Group, Policy
from workbench.fdg.unplaced import refuse_new_fragments

__all__ = ["Item", "Route", "TaskSpec", "Plan", "MeasuredSizes", "make_plan", "plan_in_flight", "human_bytes"]


@dataclass(frozen=True)
class Item:
    """One unit of a replica's program: run the ``rate`` cells of ``fragments`` in order;
    for ``rate == "step"`` that is a block of ``T`` steps."""

    rate: str
    fragments: tuple[str, ...]
    iteration: int | None = None  # None for init

    def describe(self) -> str:
        verb = "steps" if self.rate == "step" else self.rate
        return f"{verb} {', '.join(self.fragments)}"


@dataclass(frozen=True)
class Route:
    """An interface whose two ends live in different groups (so in different processes)."""

    interface: Interface
    producer_group: str
    consumer_group: str
    spatial: str
    #: taken as it arrives, one producer replica at a time (an asynchronous policy)
    arrival: bool = False
    #: read this many iterations late (a learner's weights to pipelined actors: Policy.lag)
    lag: int = 0

    @property
    def per_step(self) -> bool:
        """Exchanged every step, inside the step blocks (a direct channel between loops)."""
        return self.interface.timing == "per-step"

    @property
    def key(self) -> str:
        """The channel key: stacked, latest and per-step values of one name are different data."""
        prefix = {"stacked": "stacked:", "per-step": "step:"}.get(self.interface.timing, "")
        return f"{prefix}{self.interface.producer}.{self.interface.name}"

    @property
    def batch_axis(self) -> int:
        """Gathers concatenate along the batch axis: axis 1 once values are stacked ``[T, …]``."""
        return 1 if self.interface.timing == "stacked" else 0


@dataclass(frozen=True)
class TaskSpec:
    """A chunk of one group's program, run by every replica of the group."""

    group: str
    items: tuple[Item, ...]

    @property
    def iteration(self) -> int | None:
        """The last iteration this task works on (None for a pure init task)."""
        its = [i.iteration for i in self.items if i.iteration is not None]
        return max(its) if its else None

    def describe(self) -> str:
        body = " · ".join(i.describe() for i in self.items)
        when = f" (iteration {self.iteration})" if self.iteration is not None else " (init)"
        return f"{self.group}: {body}{when}"


#: why a route's size is not known, as its line says it → as the total says it
_IN_TOTAL = {"not written in the first iteration": "written only after the first iteration"}


class MeasuredSizes(dict):
    """Interface name → bytes of one value, as a short probe run measured them
    (:meth:`workbench.FDG.measure_sizes`), and ``empty``: the names it saw written as an
    empty list, tuple or dict (``batches = []`` until a warm-up ends). Their size is not
    known, which is not 0 B, so they are left out of the mapping, as a name the probe never
    saw written is, and :meth:`Plan.explain` says which of the two it was.

    >>> sizes = MeasuredSizes({"obs": 512}, empty=["batches"])
    >>> dict(sizes), sorted(sizes.empty)
    ({'obs': 512}, ['batches'])
    """

    def __init__(self, sizes=(), *, empty=()) -> None:
        super().__init__(sizes)
        self.empty = frozenset(empty) - set(self)


class Plan:
    """What the generator makes of FDG + policy: groups, their items, and routes."""

    def __init__(self, fdg: Graph, policy: Policy, schedule: Schedule, routes: tuple[Route, ...]):
        # a plain copy: the plan travels to workers, the caller's FDG (and namespace) does not
        self.fdg = Graph(fdg.fragments.values())
        self.policy = policy
        self.schedule = schedule
        self.routes = routes
        self.groups = {g.name: g for g in policy.groups}
        #: (value sizes, steps) when a short run measured them, for :meth:`explain`
        self.measured: tuple[dict[str, int], int] | None = None
        #: what may not mean what it seems (replicated learners without an all-reduce)
        self.warnings: list[str] = []
        self._group_of = {f: g.name for g in policy.groups for f in g.fragments}

    def group_of(self, fragment: str) -> Group:
        return self.groups[self._group_of[fragment]]

    @property
    def arrival_groups(self) -> set[str]:
        """Groups that take values as they arrive (and reply to the sender alone)."""
        return {r.consumer_group for r in self.routes if r.arrival}

    def routes_into(self, group: str) -> list[Route]:
        return [r for r in self.routes if r.consumer_group == group]

    def routes_out_of(self, group: str) -> list[Route]:
        return [r for r in self.routes if r.producer_group == group]

    def local_interfaces(self, group: str) -> list[Interface]:
        members = set(self.groups[group].fragments)
        return [e for e in self.fdg.interfaces if e.producer in members and e.consumer in members]

    def stacked_names(self, fragment: str) -> tuple[str, ...]:
        """Names ``fragment`` writes per step that some consumer reads stacked."""
        return tuple(
            dict.fromkeys(e.name for e in self.fdg.interfaces if e.producer == fragment and e.timing == "stacked")
        )

    def _phase_items(self, rate: str, iteration: int | None) -> list[tuple[str, Item]]:
        """The phase's fragments in schedule order, consecutive same-group runs merged.

        The step phase is one block per group: groups step in lockstep, each running its
        fragments in step order every step and exchanging per-step values on channels.
        """
        items: list[tuple[str, list[str]]] = []
        for name in self.schedule.order(rate):
            group = self._group_of[name]
            same = [entry for entry in items if entry[0] == group] if rate == "step" else items[-1:]
            if same and same[-1][0] == group:
                same[-1][1].append(name)
            else:
                items.append((group, [name]))
        return [(g, Item(rate, tuple(names), iteration)) for g, names in items]

    def tasks(self, iterations: int, start: int = 0, *, with_init: bool = True) -> Iterator[TaskSpec]:
        """The program as a stream of tasks, in an order that respects every data dependency.

        Consecutive items of one group merge into one task, but a task never holds two
        blocks of steps nor the iteration cells of two iterations: that keeps per-iteration
        progress visible, and lets a stop or the driver's window land between iterations (a
        group without step cells, alone, was one task for the whole run: its first report
        came at its end, and a run longer than the driver's window waited for it forever).

        >>> from workbench.fdg.graph import Graph
        >>> from workbench.fdg.policy import Group, Policy
        >>> fdg = Graph()
        >>> _ = fdg.add_fragment("learner", "w = 0", rate="init")
        >>> _ = fdg.add_fragment("learner", "w += 1", rate="iteration")
        >>> plan = make_plan(fdg, Policy("p", (Group(("learner",), 1),)))
        >>> [task.describe() for task in plan.tasks(3)]
        ['learner: init learner · iteration learner (iteration 0)', 'learner: iteration learner (iteration 1)', 'learner: iteration learner (iteration 2)']
        """
        stream: list[tuple[str, Item]] = []
        if with_init:
            stream += self._phase_items("init", None)
        pending_group, pending_items = None, []
        phases = itertools.chain(
            [stream],
            (  # lazily: a run may ask for a billion iterations
                self._phase_items("step", it) + self._phase_items("iteration", it)
                for it in range(start, start + iterations)
            ),
        )
        for stream in phases:
            for group, item in stream:
                has_steps = any(i.rate == "step" for i in pending_items)
                next_iteration = item.rate == "iteration" and any(
                    i.rate == "iteration" and i.iteration != item.iteration for i in pending_items
                )
                if group != pending_group or (item.rate == "step" and has_steps) or next_iteration:
                    if pending_items:
                        yield TaskSpec(pending_group, tuple(pending_items))
                    pending_group, pending_items = group, []
                pending_items.append(item)
        if pending_items:
            yield TaskSpec(pending_group, tuple(pending_items))

    def traffic(self, sizes: dict[str, int], steps: int) -> dict[str, int]:
        """Bytes each crossing route moves per iteration, from ``sizes``: interface name →
        bytes of one value as a single replica writes it for the whole batch (what a
        one-iteration inline run measures).

        Per-step and stacked values are batches that replicas split between them, so the
        whole batch crosses once per step (per-step) or once per iteration, ``[T, …]``
        (stacked). Per-iteration values (weights, gradients) are whole on every replica:
        one copy per receiving replica (broadcast, one-to-one) or per sending replica
        (gather, arrivals). Values written only at init cost nothing per iteration, and
        all-reduce traffic, decided by the algorithm's code, is not counted here.

        >>> from workbench.fdg.graph import Graph
        >>> from workbench.fdg.policy import Group, Policy
        >>> fdg = Graph()
        >>> _ = fdg.add_fragment("env", "o = 0", rate="init")
        >>> _ = fdg.add_fragment("actor", "a = o", rate="step")
        >>> _ = fdg.add_fragment("env", "o = a", rate="step")
        >>> plan = make_plan(fdg, Policy("p", (Group(("actor",), 1), Group(("env",), 2))))
        >>> plan.traffic({"a": 800, "o": 400}, steps=10)
        {'step:actor.a': 8000, 'step:env.o': 4000}
        """
        out: dict[str, int] = {}
        for route in self.routes:
            out[route.key] = out.get(route.key, 0) + self._route_bytes(route, sizes, steps)
        return out

    @staticmethod
    def _route_costs(route: Route) -> bool:  # (the placement board asks too)
        """Whether the route moves bytes every iteration (not only at init)."""
        edge = route.interface
        return edge.timing in ("per-step", "stacked") or (edge.timing != "once" and "iteration" in edge.producer_rates)

    def _route_bytes(self, route: Route, sizes: dict[str, int], steps: int) -> int:
        edge = route.interface
        size = sizes.get(edge.name, 0)
        if edge.timing in ("per-step", "stacked"):
            return steps * size
        if edge.timing == "once" or "iteration" not in edge.producer_rates:
            return 0
        if route.spatial == "gather":
            return size * self.groups[route.producer_group].replicas
        return size * self.groups[route.consumer_group].replicas

    def explain(self, sizes: dict[str, int] | None = None, steps: int | None = None) -> str:
        """What runs where, and what crosses process boundaries (with bytes per iteration
        when value ``sizes`` and ``steps`` are given, or were measured: see :meth:`traffic`).

        A name the sizes lack is said to be of unknown size, not 0 B, and the total is then
        "at least": the probe did not see it written, or (:class:`MeasuredSizes`) saw it
        written empty, as a list of batches that a warm-up leaves empty at first."""
        if sizes is None and self.measured is not None:
            sizes, steps = self.measured
        moved = self.traffic(sizes, steps) if sizes is not None and steps else None
        lines = [f"plan for policy {self.policy.name!r}:"]
        for group in self.policy.groups:
            where = ", ".join(dict.fromkeys(group.workers)) or "anywhere"
            lines.append(f"  {group.name} ×{group.replicas} on {where} ({group.device})")
        if self.routes:
            lines.append("  crossing processes:")
            unmeasured: dict[str, str] = {}  # name → why its size is not known
            empty = getattr(sizes, "empty", ())
            for r in self.routes:
                how = "as it arrives, one replica at a time" if r.arrival else r.spatial
                size = ""
                if moved is not None and r.interface.name not in sizes and self._route_costs(r):
                    # not bound in the probe's first iteration (a learner that starts after a
                    # warm-up), or bound to an empty list (batches sampled only after it):
                    # its size is unknown, not 0 B
                    why = (
                        "written empty in the first iteration"
                        if r.interface.name in empty
                        else "not written in the first iteration"
                    )
                    size = f", size not measured: {why}"
                    unmeasured[r.interface.name] = why
                elif moved is not None:
                    size = f", {human_bytes(self._route_bytes(r, sizes, steps))}/iteration"
                lines.append(f"    {r.interface.describe()} [{how}{size}]")
            if moved is not None:
                by_why: dict[str, list[str]] = {}
                for name, why in unmeasured.items():
                    by_why.setdefault(_IN_TOTAL.get(why, why), []).append(name)
                plus = "; ".join(f"{', '.join(names)}, {why}" for why, names in by_why.items())
                lines.append(
                    f"  on the wire per iteration: {'at least' if unmeasured else 'at most'} "
                    f"{human_bytes(sum(moved.values()))} "
                    + (f"(plus {plus})" if unmeasured else "(less where two groups share a worker process)")
                )
        else:
            lines.append("  nothing crosses processes: every interface is an in-process hand-off")
        lines += [f"  WARNING: {message}" for message in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.explain()


def human_bytes(count: float) -> str:
    """Bytes for people, in binary units — the same the dashboard's bytes axis uses:
    ``human_bytes(75_000)`` is ``'73.2 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    return f"{count:,.1f} GiB"


def plan_in_flight(fdg: Graph, policy: Policy) -> Plan:
    """:func:`make_plan` for the FDG as an edit during a run would leave it, under the run's
    placement: a fragment new since the run started is refused first, saying it cannot join
    a run in flight (:func:`workbench.fdg.unplaced.refuse_new_fragments`)."""
    refuse_new_fragments(fdg, policy)
    return make_plan(fdg, policy)


def make_plan(fdg: Graph, policy: Policy) -> Plan:
    """Build the plan. Raises :class:`PlacementError` when the placement cannot work."""
    schedule = fdg.schedule()
    policy.check(fdg)
    group_of = {f: g for g in policy.groups for f in g.fragments}
    routes = []
    for edge in fdg.interfaces:
        src, dst = group_of[edge.producer], group_of[edge.consumer]
        if src.name == dst.name:
            continue
        # one → many: per-step data is a batch to split (actions for each env replica);
        # per-iteration data is one thing every replica needs (weights)
        spatial = spatial_kind(src.replicas, dst.replicas, scatter=edge.timing == "per-step")
        if spatial == "incompatible":
            raise PlacementError(
                f"{edge.describe()}: {src.replicas} replicas of {edge.producer!r} cannot feed "
                f"{dst.replicas} replicas of {edge.consumer!r}; use equal counts or 1 on one side."
            )
        # a value written only at init arrives once, not with every iteration: the async
        # consumer reads it from the producers' init tasks, by the gather rule (one value
        # when every replica wrote the same), as every other policy does
        arrival = (
            policy.asynchronous
            and spatial == "gather"
            and edge.timing != "per-step"
            and tuple(edge.producer_rates) != ("init",)
        )
        routes.append(Route(edge, src.name, dst.name, spatial, arrival, _lag(policy, edge, src, dst, schedule)))
    plan = Plan(fdg, policy, schedule, tuple(routes))
    independent, overridden = independent_learners(fdg, policy), overridden_options(fdg, policy)
    plan.warnings = independent + overridden
    for category, messages in ((IndependentLearnersWarning, independent), (OverriddenOptionWarning, overridden)):
        for message in messages:
            warnings.warn(category(message), stacklevel=2)
    return plan


def _lag(policy: Policy, edge, src, dst, schedule: Schedule) -> int:
    """``policy.lag`` for what a group without step cells (a learner) writes each iteration
    for a group with them (actors) to read; else 0."""
    acting = set(schedule.step_order)
    feedback = (
        not acting & set(src.fragments)
        and acting & set(dst.fragments)
        and edge.timing in ("per-iteration", "latest")
        and "iteration" in edge.producer_rates
    )
    if feedback and policy.lag and "init" not in edge.producer_rates:
        raise PlacementError(
            f"{edge.describe()}: with lag {policy.lag} ({policy.name}), {edge.consumer!r} reads {edge.name!r} "
            f"{policy.lag} iteration(s) late, so its first iterations read the value {edge.producer!r} "
            f"wrote before its first iteration: give {edge.name!r} a first value in the --init cell of "
            f"{edge.producer!r}, or use a policy without a lag."
        )
    return policy.lag if feedback else 0


class OverriddenOptionWarning(UserWarning):
    """A ``%%fragment`` cell asked for a replica count or a device the policy does not give."""


def overridden_options(fdg: Graph, policy: Policy) -> list[str]:
    """What fragments asked for in their cells (``--replicas N``, ``--device gpu|cpu``) and
    this policy does not give them: presets place by their own rule, so an option there is
    a wish that would otherwise be dropped without a word. (A fragment with no
    ``--device`` is on "cpu" by default, so only a GPU wish that lands on a CPU is said.)

    >>> from workbench.fdg.policy import Group, Policy
    >>> g = Graph()
    >>> _ = g.add_fragment("env", "x = 0", rate="step", replicas=8)
    >>> overridden_options(g, Policy("p", (Group(("env",), replicas=2),)))[0][:62]
    "fragment 'env' asks for --replicas 8 in its cell, but policy p"
    """
    out = []
    for group in policy.groups:
        for name in group.fragments:
            frag = fdg[name]
            if frag.replicas is not None and frag.replicas != group.replicas:
                out.append(
                    f"fragment {name!r} asks for --replicas {frag.replicas} in its cell, but policy "
                    f"{policy.name} runs it as {group.replicas} (a preset places by its own rule). "
                    "To have it, place by hand: %fdg place, or a wb.Policy whose group gives "
                    f"{name!r} {frag.replicas} replicas."
                )
            # a GPU wish only: "cpu" is every fragment's default, so it says nothing about a wish
            if frag.device == "gpu" and group.device == "cpu":
                out.append(
                    f"fragment {name!r} asks for --device {frag.device} in its cell, but policy "
                    f"{policy.name} runs it on {'a GPU' if group.device == 'gpu' else 'the CPU'} "
                    f"(its group {group.name!r}). To have it, place by hand: %fdg place, or a "
                    f"wb.Policy whose group for {name!r} has device={frag.device!r}."
                )
    return out


def reaches_allreduce(code: str, namespace: Mapping[str, Any], depth: int = 6) -> bool:
    """Whether a cell calls ``allreduce``, itself or through the functions it calls (PPO's
    update calls ``_sync_and_clip``, which all-reduces): the cell's text, then the code of
    each function it names in ``namespace`` (``update``, ``ppo.update``), and theirs.

    >>> def sync(g): return wb.allreduce(g)
    >>> def update(g): return sync(g) * 2
    >>> reaches_allreduce("loss = update(g)", {"update": update}), reaches_allreduce("loss = g", {})
    (True, False)
    """
    if re.search(r"\ballreduce\s*\(", code):
        return True
    seen: set[int] = set()
    for dotted in dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", code)):
        head, *rest = dotted.split(".")
        obj = namespace.get(head)
        for attr in rest:
            obj = getattr(obj, attr, None) if obj is not None and not isinstance(obj, (int, float, str)) else None
        if _function_reaches(obj, depth, seen):
            return True
    return False


def _function_reaches(fn: Any, depth: int, seen: set[int]) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None or depth <= 0 or id(code) in seen:
        return False
    seen.add(id(code))
    names = set(code.co_names)
    stack = [c for c in code.co_consts if hasattr(c, "co_names")]  # nested functions, comprehensions
    while stack:
        inner = stack.pop()
        names.update(inner.co_names)
        stack.extend(c for c in inner.co_consts if hasattr(c, "co_names"))
    if "allreduce" in names:
        return True
    scope = getattr(fn, "__globals__", {})
    return any(_function_reaches(scope.get(n), depth - 1, seen) for n in names if callable(scope.get(n)))


class IndependentLearnersWarning(UserWarning):
    """A learner runs as several replicas that never combine what they learn."""


def independent_learners(fdg: Graph, policy: Policy) -> list[str]:
    """Why replicated learners would learn independently: a fragment without step cells
    that reads what a fragment with step cells writes (a learner: it consumes experience)
    placed as several replicas whose cells never call ``wb.allreduce`` — each replica then
    trains on its own data, and their returns are pooled into one number. A fragment that
    reads only the learner's output (an evaluator, a logger) learns nothing to average.

    >>> from workbench.fdg.policy import Group, Policy
    >>> g = Graph()
    >>> _ = g.add_fragment("env", "reward = 1.0", rate="step")
    >>> _ = g.add_fragment("learner", "w = reward.sum()", rate="iteration")
    >>> _ = g.add_fragment("evaluator", "score = w * 2", rate="iteration")
    >>> policy = Policy("p", (Group(("env",)), Group(("learner",), replicas=2), Group(("evaluator",), replicas=2)))
    >>> [m[:43] for m in independent_learners(g, policy)]
    ["fragment 'learner' runs as 2 replicas (poli"]
    """
    out = []
    for group in policy.groups:
        if group.replicas < 2:
            continue
        for name in group.fragments:
            frag = fdg[name]
            if "step" in frag.cells or "iteration" not in frag.cells:
                continue
            if not any("step" in fdg[e.producer].cells for e in fdg.interfaces if e.consumer == name):
                continue  # reads no experience: an evaluator of the learner's weights, a logger
            namespace = getattr(fdg, "namespace", None) or {}  # a session's FDG has the notebook's
            if any(reaches_allreduce(cell.code, namespace) for cell in frag.cells.values()):
                continue
            out.append(
                f"fragment {name!r} runs as {group.replicas} replicas (policy {policy.name}) but its "
                "cells never call wb.allreduce: each replica would learn on its own data alone, "
                "and their returns would be pooled as if one agent had earned them. Average the "
                "gradients across replicas (for p in net.parameters(): p.grad = "
                f"wb.allreduce(p.grad)), or give {name!r} one replica (policy coarse)."
            )
    return out
