"""Wiring: which task's output each task's input is, decided from the task stream alone.

Every replica walks the same task stream (:meth:`Plan.tasks`), so each can work out, with
no coordinator, that an input of task ``t`` is the *latest* emission of its key by a task
before ``t`` in program order. A producer sends every emission of a key to the replicas
of the groups that read that key; a consumer keeps the newest value it has been sent until
it asks for a newer one. The stream is generated lazily: a million-iteration run costs
nothing up front.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.policy import Group, Policy
    >>> from workbench.fdg.plan import make_plan
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "act = obs", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = act", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = obs.sum()", rate="iteration")
    >>> policy = Policy("p", (Group(("actor", "env"), 2), Group(("learner",), 1)))
    >>> tasks = wire(make_plan(fdg, policy), iterations=1)
    >>> [(t.index, t.spec.group, [i.producer_task for i in t.inputs]) for t in tasks]
    [(0, 'actor+env', []), (1, 'learner', [0])]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from workbench.fdg.errors import PlacementError
from workbench.fdg.plan import Plan, TaskSpec

__all__ = ["WiredInput", "WiredEmit", "WiredTask", "wire", "wire_stream", "senders_for", "receivers_for"]


@dataclass(frozen=True)
class WiredInput:
    """Task input ``key``: the emission of task ``producer_task`` (a task of
    ``producer_group``), combined across replicas as ``spatial`` along ``axis``."""

    key: str
    producer_group: str
    producer_task: int
    spatial: str
    axis: int
    #: taken as it arrives from any producer replica (async), not gathered from all
    arrival: bool = False


@dataclass(frozen=True)
class WiredEmit:
    """Task output ``key`` goes to replicas of ``consumer_group`` (which ones: ``spatial``)."""

    key: str
    consumer_group: str
    spatial: str
    #: sent back only to the replica whose arrival this task answered (async)
    reply: bool = False
    #: the consumer takes it as it arrives: it travels with its iteration number
    arrival: bool = False


@dataclass(frozen=True)
class WiredTask:
    index: int
    spec: TaskSpec
    inputs: tuple[WiredInput, ...]
    emits: tuple[WiredEmit, ...]

    @property
    def iteration(self) -> int | None:
        return self.spec.iteration


def wire_stream(plan: Plan, iterations: int, start: int = 0, *, with_init: bool = True) -> Iterator[WiredTask]:
    """The plan's task stream with every input resolved to its producer task, lazily.

    Raises :class:`PlacementError` when a task would read a name before it was produced.
    """
    latest: dict[str, tuple[int, str]] = {}  # key → (task index, producer group)
    # async: a group's inputs from a group that answers arrivals are the answer to this
    # group's own last message to it (the task index of that message tags the reply)
    last_sent: dict[tuple[str, str], int] = {}  # (group, answering group) → task index
    # …but only for what the answering group does send as answers: a value it wrote once
    # at init (and never again) stays the broadcast from its init task
    answered: set[str] = set()
    answering = plan.arrival_groups
    # a lagged route (Policy.lag) reads an older emission: each key's last few, by iteration
    lags = {r.key: r.lag for r in plan.routes if r.lag}
    history: dict[str, list[tuple[int | None, int, str]]] = {}  # key → [(iteration, task, group)]
    readers: dict[str, list[tuple[str, str, bool]]] = {}  # key → [(consumer group, spatial, arrival)]
    for route in plan.routes:
        if route.per_step:
            continue  # per-step values move inside step blocks, not between tasks
        pair = (route.consumer_group, route.spatial, route.arrival)
        if pair not in readers.setdefault(route.key, []):
            readers[route.key].append(pair)
    for index, spec in enumerate(plan.tasks(iterations, start, with_init=with_init)):
        inputs: list[WiredInput] = []
        for route in plan.routes_into(spec.group):
            edge = route.interface
            if route.per_step:
                continue
            if not any(edge.consumer in it.fragments and it.rate == edge.consumer_rate for it in spec.items):
                continue
            if any(w.key == route.key for w in inputs):
                continue
            if route.key not in latest:
                raise PlacementError(
                    f"{edge.describe()}: {edge.consumer!r} needs {edge.name!r} before "
                    f"{edge.producer!r} has produced it. Give it a first value in "
                    f"{edge.producer!r}'s --init cell."
                )
            producer_task, producer_group = latest[route.key]
            if route.lag:
                producer_task, producer_group = _lagged(history[route.key], route)
            if producer_group in answering and route.key in answered:
                producer_task = last_sent.get((spec.group, producer_group), producer_task)
            inputs.append(
                WiredInput(route.key, producer_group, producer_task, route.spatial, route.batch_axis, route.arrival)
            )
        emitted = _emitted_keys(plan, spec)
        for key in emitted:
            latest[key] = (index, spec.group)
            if key in lags:
                history[key] = _kept(history.get(key, []) + [(spec.iteration, index, spec.group)], lags[key])
        emits = tuple(
            WiredEmit(
                key, group, spatial, reply=spec.group in answering and any(w.arrival for w in inputs), arrival=arrival
            )
            for key in emitted
            for group, spatial, arrival in readers[key]
        )
        for emit in emits:
            if emit.consumer_group in answering:
                last_sent[(spec.group, emit.consumer_group)] = index
            if emit.reply:
                answered.add(emit.key)
        yield WiredTask(index, spec, tuple(inputs), emits)


def _old_enough(iteration: int | None, newest: int | None, lag: int) -> bool:
    """An emission of ``iteration`` is ``lag`` iterations older than one of ``newest`` (an
    init value, None, is older than every iteration)."""
    return iteration is None or newest is None or iteration <= newest - lag


def _kept(emissions: list[tuple[int | None, int, str]], lag: int) -> list[tuple[int | None, int, str]]:
    """What a lagged reader may still want: the newest emission old enough and all after it."""
    newest = emissions[-1][0]
    return emissions[max((k for k, e in enumerate(emissions) if _old_enough(e[0], newest, lag)), default=0) :]


def _lagged(emissions: list[tuple[int | None, int, str]], route) -> tuple[int, str]:
    """The (task, group) of the newest emission ``route.lag`` iterations older than the
    newest, which a reader without the lag would take. The producer wrote the value at init
    too (make_plan checks), and that is older than every iteration: the first ``lag``
    iterations read it."""
    newest = emissions[-1][0]
    return next(
        (task, group) for iteration, task, group in reversed(emissions) if _old_enough(iteration, newest, route.lag)
    )


def wire(plan: Plan, iterations: int, start: int = 0, *, with_init: bool = True) -> list[WiredTask]:
    """:func:`wire_stream` as a list (for inspection and tests)."""
    return list(wire_stream(plan, iterations, start, with_init=with_init))


def _emitted_keys(plan: Plan, spec: TaskSpec) -> list[str]:
    keys = []
    for route in plan.routes_out_of(spec.group):
        edge = route.interface
        if route.per_step:
            continue
        for item in spec.items:
            if edge.producer in item.fragments and (
                (edge.timing == "stacked" and item.rate == "step")
                or (edge.timing != "stacked" and item.rate in edge.producer_rates)
            ):
                keys.append(route.key)
    return list(dict.fromkeys(keys))


def senders_for(spatial: str, consumer_replica: int, producer_replicas: int) -> list[int]:
    """Which producer replicas a consumer replica receives from.

    >>> senders_for("gather", 0, 3), senders_for("broadcast", 2, 1), senders_for("one-to-one", 1, 2)
    ([0, 1, 2], [0], [1])
    """
    if spatial == "gather":
        return list(range(producer_replicas))
    if spatial == "one-to-one":
        return [consumer_replica]
    return [0]


def receivers_for(spatial: str, producer_replica: int, consumer_replicas: int) -> list[int]:
    """Which consumer replicas a producer replica sends to (the mirror of senders_for).

    >>> receivers_for("gather", 2, 1), receivers_for("broadcast", 0, 3), receivers_for("one-to-one", 1, 2)
    ([0], [0, 1, 2], [1])
    """
    if spatial == "gather":
        return [0]
    if spatial == "one-to-one":
        return [producer_replica]
    return list(range(consumer_replicas)) if producer_replica == 0 else []
