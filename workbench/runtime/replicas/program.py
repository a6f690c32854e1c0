"""What a group of fused fragments runs, as plain data: the code per fragment and rate,
where each cell's inputs come from (:class:`Binding`), what the group sends on, and the
:class:`TaskReport` a replica sends the driver after each task. Built once per run from
the plan (:func:`group_program`) and shipped to every replica of the group; the live
state that runs it is :class:`~workbench.runtime.replicas.replica.GroupReplica`.

Example::

    >>> report = TaskReport("actor", 0, "w0", env_steps={3: 512})
    >>> TaskReport.from_message(report.to_message()).env_steps
    {3: 512}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.fdg.plan import Plan
from workbench.runtime.state.counting import env_fragments

__all__ = ["Binding", "Emit", "StepSend", "GroupProgram", "TaskReport", "group_program"]


@dataclass(frozen=True)
class Binding:
    """Where one input of a cell comes from.

    ``source`` is ``"local"`` (another fragment of this group; ``stacked`` takes its step
    buffer), ``"inbox"`` (delivered from another group under ``key`` at the task's start)
    or ``"step"`` (received from another group's step loop, every step).
    """

    name: str
    source: str
    producer: str = ""
    stacked: bool = False
    key: str = ""
    #: for ``source == "step"``: the producer's group, how replicas combine, and which of
    #: the producer's messages the consumer's k-th read is (k + offset)
    producer_group: str = ""
    spatial: str = ""
    offset: int = 0


@dataclass(frozen=True)
class Emit:
    """A value this group sends to another group at the end of a task."""

    key: str
    producer: str
    name: str
    stacked: bool


@dataclass(frozen=True)
class StepSend:
    """A value this group sends to another group's step loop after every step (and after
    init, when the producer gives it a first value there)."""

    key: str
    producer: str
    name: str
    consumer_group: str
    spatial: str
    at_init: bool


@dataclass(frozen=True)
class GroupProgram:
    """Everything a replica of ``group`` needs to run, as plain picklable data."""

    group: str
    code: dict[tuple[str, str], str]
    bindings: dict[tuple[str, str], tuple[Binding, ...]]
    recorded: dict[str, tuple[str, ...]]
    emits: tuple[Emit, ...]
    steps: int
    step_sends: tuple[StepSend, ...] = ()
    #: env fragments in this group (see :mod:`workbench.runtime.state.counting`), each with the
    #: names its step cell writes (where its batch is read): each env step is counted
    #: once, by the replica that takes it
    counted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: groups that hold env fragments (they tell every replica their counts, for
    #: ``wb.env_steps()``)
    env_groups: tuple[str, ...] = ()
    #: keys this group takes as they arrive (an asynchronous policy)
    arrival_keys: tuple[str, ...] = ()
    #: per fragment, the names that are its state (what it binds), for export/restore
    state_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: whether each replica draws from its own random streams (RunConfig.own_random)
    own_random: bool = True
    #: how ``wb.allreduce`` travels: auto, channels or torch (RunConfig.allreduce;
    #: workbench.runtime.transport.process_group)
    allreduce: str = "auto"
    #: step its co-located replicas as lanes of one thread (RunConfig.lanes;
    #: workbench.runtime.replicas.lanes)
    lanes: bool = False
    #: run the group's steps on each sender's values as they arrive (RunConfig.act_on_arrival;
    #: workbench.runtime.replicas.on_arrival)
    act_on_arrival: bool = False

    @property
    def steps_on_its_own(self) -> bool:
        """Whether the group has step cells and they take nothing from other groups every
        step (a fused actor+env): a loop that can run as a lane, never blocking its thread
        on a value another lane of it has yet to produce."""
        return any(rate == "step" for _, rate in self.code) and not any(
            b.source == "step" for (_, rate), bs in self.bindings.items() if rate == "step" for b in bs
        )


@dataclass
class TaskReport:
    """What a task tells the driver (small: it goes to the notebook)."""

    group: str
    replica: int
    worker: str
    metrics: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    env_steps: dict[int, int] = field(default_factory=dict)
    compute_seconds: dict[str, float] = field(default_factory=dict)
    #: time the task spent waiting for its inputs, and sending its outputs
    wait_seconds: float = 0.0
    send_seconds: float = 0.0
    #: of the sending, the CPU time of the replica's thread (the rest waited: for the GIL,
    #: for a core, for a socket's buffer)
    send_cpu_seconds: float = 0.0
    #: the rest of the task's time: binding inputs, stacking step buffers, emitting
    other_seconds: float = 0.0
    #: the iterations whose items this task ran
    iterations: list[int] = field(default_factory=list)
    #: bytes this task sent to other processes (in-process hand-offs cost none)
    sent_bytes: int = 0
    #: env steps this replica's env fragments had counted before this stretch (a resumed
    #: run's, from their state); sent once, with the stretch's first counted steps
    env_steps_base: int = 0
    #: warnings for the notebook, each sent once: (the run's event kind, the message)
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: metric names its cells logged with ``prog_bar=True`` (the progress shows them)
    shown: list[str] = field(default_factory=list)

    def to_message(self) -> dict:
        """Plain msgpack-able form (string keys only), for Dask events."""
        return {
            "group": self.group,
            "replica": self.replica,
            "worker": self.worker,
            "metrics": {str(k): v for k, v in self.metrics.items()},
            "env_steps": {str(k): v for k, v in self.env_steps.items()},
            "compute_seconds": self.compute_seconds,
            "wait_seconds": self.wait_seconds,
            "send_seconds": self.send_seconds,
            "send_cpu_seconds": self.send_cpu_seconds,
            "other_seconds": self.other_seconds,
            "iterations": self.iterations,
            "sent_bytes": self.sent_bytes,
            "env_steps_base": self.env_steps_base,
            "notes": self.notes,
            "shown": self.shown,
        }

    @classmethod
    def from_message(cls, msg: dict) -> "TaskReport":
        return cls(
            msg["group"],
            msg["replica"],
            msg["worker"],
            metrics={int(k): v for k, v in msg["metrics"].items()},
            env_steps={int(k): v for k, v in msg["env_steps"].items()},
            compute_seconds=dict(msg["compute_seconds"]),
            wait_seconds=msg["wait_seconds"],
            send_seconds=msg["send_seconds"],
            send_cpu_seconds=msg.get("send_cpu_seconds", 0.0),
            other_seconds=msg.get("other_seconds", 0.0),
            iterations=list(msg["iterations"]),
            sent_bytes=msg["sent_bytes"],
            env_steps_base=msg.get("env_steps_base", 0),
            notes=[tuple(n) for n in msg.get("notes", ())],
            shown=list(msg.get("shown", ())),
        )


def group_program(
    plan: Plan,
    group: str,
    steps: int,
    own_random: bool = True,
    allreduce: str = "auto",
    lanes: bool = False,
    act_on_arrival: bool = False,
) -> GroupProgram:
    """Compile the plan's view of one group into a :class:`GroupProgram`."""
    members = plan.groups[group].fragments
    code, bindings = {}, {}
    for name in members:
        frag = plan.fdg[name]
        for rate, cell in frag.cells.items():
            code[(name, rate)] = cell.code
            bindings[(name, rate)] = _bindings_for(plan, group, name, rate)
    recorded = {name: plan.stacked_names(name) for name in members}
    outgoing = plan.routes_out_of(group)
    emits = tuple(
        Emit(r.key, r.interface.producer, r.interface.name, r.interface.timing == "stacked")
        for r in {r.key: r for r in outgoing if not r.per_step}.values()
    )
    step_sends = tuple(
        StepSend(
            r.key,
            r.interface.producer,
            r.interface.name,
            r.consumer_group,
            r.spatial,
            "init" in r.interface.producer_rates,
        )
        for r in {(r.key, r.consumer_group): r for r in outgoing if r.per_step}.values()
    )
    envs = env_fragments(plan.fdg)
    counted = {f: plan.fdg[f].writes_at("step") for f in envs if f in members}
    env_groups = tuple(g for g, grp in plan.groups.items() if any(f in envs for f in grp.fragments))
    arrival_keys = tuple(dict.fromkeys(r.key for r in plan.routes_into(group) if r.arrival))
    state_names = {name: tuple(n for n in plan.fdg[name].writes if n != "replica") for name in members}
    return GroupProgram(
        group,
        code,
        bindings,
        recorded,
        emits,
        steps,
        step_sends,
        counted=counted,
        env_groups=env_groups,
        arrival_keys=arrival_keys,
        state_names=state_names,
        own_random=own_random,
        allreduce=allreduce,
        lanes=lanes,
        act_on_arrival=act_on_arrival,
    )


def _bindings_for(plan: Plan, group: str, fragment: str, rate: str) -> tuple[Binding, ...]:
    out = []
    local = {(e.name, e.consumer, e.consumer_rate): e for e in plan.local_interfaces(group)}
    remote = {(r.interface.name, r.interface.consumer, r.interface.consumer_rate): r for r in plan.routes_into(group)}
    for name in plan.fdg[fragment].external_inputs(rate):
        edge = local.get((name, fragment, rate))
        if edge is not None:
            out.append(Binding(name, "local", edge.producer, edge.timing == "stacked"))
        elif (name, fragment, rate) in remote:
            route = remote[(name, fragment, rate)]
            if route.per_step:
                order = plan.schedule.step_order
                forward = order.index(route.interface.producer) < order.index(fragment)
                offset = 1 if forward and "init" in route.interface.producer_rates else 0
                out.append(
                    Binding(
                        name,
                        "step",
                        route.interface.producer,
                        key=route.key,
                        producer_group=route.producer_group,
                        spatial=route.spatial,
                        offset=offset,
                    )
                )
            else:
                out.append(Binding(name, "inbox", key=route.key))
    return tuple(out)
