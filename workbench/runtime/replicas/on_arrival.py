"""Acting on each env replica's values as they arrive (``fdg.run(…, act_on_arrival=True)``).

Under a fine-grained policy (SingleLearnerFine) the actor's step gathers every env
replica's observations, acts on the whole batch and scatters the actions: every step waits
for the slowest env replica. On a 16-core host that per-step barrier alone, with no
framework at all, kept 78 % of the ideal rate at 32 env workers (docs/gpu.md, "bare
lockstep"). Here the actor's step cells run on whatever has arrived instead: it waits for
the first env replica's values, takes every other one already in, runs its cells once on
that batch (in replica order), and sends each replica its rows at once, so a replica that
answered early steps on while a slow one is still stepping. Each env replica still takes
``steps`` steps an iteration; the learner gets the same ``[T, N, …]`` batches, each env
replica's column in its own step order.

What changes: the actor's batches (and so its random draws) follow the arrival order, which
differs from run to run; with an actor that draws nothing, every env replica's trajectory
is the lockstep one. The actor's step cells run without taking turns with the replicas of
their process (``own_random``): an env replica there holds its turn through its whole
step, a simulator's wait included, and waiting for it would put the barrier back (measured
on 2 cores, 2 workers: 20 % slower than lockstep with turns, level without); the actor
then draws from whichever replica's random streams the process holds. What is refused (:func:`refusal`): an actor step cell that reads what
a step cell of its group wrote in an earlier step (a recurrent state, kept for the whole
batch, would mix env replicas), values for the envs that are not split by rows (a
scatter), and envs that step one plain env each (no batch axis to split).

Example (the plain case it serves)::

    run = fdg.run(iterations=100, policy="fine", act_on_arrival=True)
"""

from __future__ import annotations

import time

from workbench.fdg.plan import Plan
from workbench.runtime.values.arrays import Unbatched, gather, handed_over, split_rows
from workbench.runtime.process.cell_exit import is_cell_error
from workbench.runtime.transport.channels import Stopped

__all__ = ["acts_on_arrival", "check_act_on_arrival", "refusal", "step_on_arrival", "NOT_PLACED_TO_ACT_ON_ARRIVAL"]

NOT_PLACED_TO_ACT_ON_ARRIVAL = (
    "act_on_arrival applies to a group whose step cells gather another group's per-step values "
    "(the actor under SingleLearnerFine); this policy has none, so every step runs as usual"
)


def _gathers(program) -> list:
    return [
        (frag, b) for (frag, rate), bs in program.bindings.items() if rate == "step" for b in bs if b.source == "step"
    ]


def acts_on_arrival(program, counts: dict[str, int]) -> bool:
    """Whether this group's steps run on arrival: asked for, one replica, gathering one
    other group's per-step values."""
    gathers = _gathers(program)
    return (
        program.act_on_arrival
        and counts.get(program.group) == 1
        and bool(gathers)
        and all(b.spatial == "gather" for _, b in gathers)
        and len({b.producer_group for _, b in gathers}) == 1
    )


def check_act_on_arrival(plan: Plan, programs: dict, run) -> None:
    """Before deploying: a group that would act on arrival and cannot is a
    :class:`~workbench.errors.RunConfigError` saying why (nothing has run); none that would
    is a note that the option was not applied."""
    from workbench.errors import RunConfigError

    counts = {name: group.replicas for name, group in plan.groups.items()}
    acting = [name for name, program in programs.items() if acts_on_arrival(program, counts)]
    if not acting:
        run.note_once("not applied", NOT_PLACED_TO_ACT_ON_ARRIVAL)
    for name in acting:
        why = refusal(plan, name)
        if why:
            raise RunConfigError(f"act_on_arrival: {why}")


def refusal(plan: Plan, group: str) -> str | None:
    """Why ``group`` cannot act on arrival (None: it can): a step cell that reads a name
    its group's step cells write (state carried from one step to the next), or a value it
    sends to the env replicas every step that is not split by rows."""
    members = plan.groups[group].fragments
    step_writes = {n for f in members for n in plan.fdg[f].writes_at("step")}
    for name in members:
        cell = plan.fdg[name].cells.get("step")
        if cell is None:
            continue
        carried = sorted(n for n in cell.inputs if n in step_writes and n not in cell.declared_reads)
        if carried:
            return (
                f"fragment {name!r} reads {', '.join(carried)} in its step cell, which a step cell of its "
                "group wrote the step before: acting on each env replica's values as they arrive would "
                "mix the replicas' rows of it. Keep such state per env (in the env fragment) or run "
                "without act_on_arrival."
            )
    answered = {r.producer_group for r in plan.routes_into(group) if r.per_step}
    for route in plan.routes_out_of(group):
        if route.per_step and route.consumer_group not in answered:
            return (
                f"{route.interface.producer!r} sends {route.interface.name!r} every step to "
                f"{route.consumer_group!r}, which sends this group nothing every step: acting on arrival "
                "answers only the replicas whose values it acted on. Run without act_on_arrival."
            )
        if route.per_step and route.spatial != "scatter":
            return (
                f"{route.interface.producer!r} sends {route.interface.name!r} to "
                f"{route.consumer_group!r} every step as a {route.spatial}, not split by rows: acting on "
                "arrival answers each env replica with its own rows only. Run without act_on_arrival."
            )
    return None


def step_on_arrival(replica, item, inbox: dict, report, ctx) -> None:
    """The group's ``steps`` steps of this iteration, each env replica's as its values come
    (see the module); fills the step buffers as the lockstep loop does."""
    program, peers = replica.program, replica.peers
    gathers = _gathers(program)
    senders = list(range(peers.counts[gathers[0][1].producer_group]))
    steps = program.steps
    done = dict.fromkeys(senders, 0)
    read = {(b.key, frag): replica._read.get((b.key, frag), 0) for frag, b in gathers}  # before this iteration
    tag_base = {(b.key, frag): read[(b.key, frag)] + b.offset for frag, b in gathers}  # sender k's step t: + t
    sent_base = {s.key: replica._sent.get(s.key, 0) for f in item.fragments for s in replica._sends[f]}
    rows = {f: {n: {k: [] for k in senders} for n in program.recorded[f]} for f in item.fragments}
    clock = dict.fromkeys(item.fragments, 0.0)
    first_frag, first = gathers[0]
    while any(done[k] < steps for k in senders):
        waiting = time.perf_counter()
        wanted = {k: tag_base[(first.key, first_frag)] + done[k] for k in senders if done[k] < steps}
        arrived = dict(peers.mailbox.take_ready(first.key, wanted, peers.stopped))
        batch = sorted(arrived)
        values = {(first.key, first_frag): [arrived[k] for k in batch]}
        for frag, b in gathers[1:]:  # the same replicas' other values of their step
            values[(b.key, frag)] = [
                peers.mailbox.take(b.key, tag_base[(b.key, frag)] + done[k], k, peers.stopped) for k in batch
            ]
        replica.step_wait_seconds += time.perf_counter() - waiting
        if any(isinstance(v, Unbatched) for vs in values.values() for v in vs):
            raise replica._error(
                first_frag,
                "step",
                ValueError(
                    "act_on_arrival needs env replicas that step a batch of envs (values with a batch axis): "
                    "this one steps one plain env. Use a vector env (wb.envs.make(…, num_envs=N)) or run "
                    "without act_on_arrival."
                ),
                item.iteration,
            )
        sizes = [_rows(v) for v in values[(first.key, first_frag)]]
        ctx.step = min(done[k] for k in batch)
        for frag in item.fragments:
            clock[frag] += _run_cell(replica, frag, item, inbox, values, batch, sizes, done, rows[frag], sent_base)
        for k in batch:
            done[k] += 1
    ctx.step = None
    for where, count in read.items():
        replica._read[where] = count + steps
    for key, base in sent_base.items():
        replica._sent[key] = base + steps
    for frag in item.fragments:  # each step's rows of every replica, in replica order
        replica.buffers[frag] = {
            n: [gather([per[k][t] for k in senders], 0) for t in range(steps)] for n, per in rows[frag].items()
        }
    replica.steps_done += steps
    for frag, seconds in clock.items():
        report.compute_seconds[frag] = report.compute_seconds.get(frag, 0.0) + seconds


def _rows(value) -> int:
    """Rows of a replica's batch (a dict or tuple of arrays: of its first)."""
    while isinstance(value, (dict, tuple)):
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return len(value)


def _run_cell(replica, frag, item, inbox, values, batch, sizes, done, rows, sent_base) -> float:
    """One fragment's step cell on the rows of ``batch``: bind, run, keep each replica's
    rows of what it records, send each replica its rows. Returns its seconds."""
    code = replica.compiled.get((frag, "step"))
    if code is None:
        return 0.0
    ns, bindings = replica.namespaces[frag], replica.program.bindings[(frag, "step")]
    replica._bind(frag, "step", ns, tuple(b for b in bindings if b.source != "step"), inbox, item.iteration)
    for b in bindings:
        if b.source == "step":
            ns[b.name] = gather(values[(b.key, frag)], 0)
    replica.running_cell = (frag, "step")
    # no turn: an env replica of this process holds its turn through its whole step (a
    # simulator's wait included), and waiting for it would put the barrier back
    start = time.perf_counter()
    try:
        exec(code, ns)
    except Stopped:
        raise
    except BaseException as exc:  # sys.exit and os._exit too: the cell's error
        if not is_cell_error(exc):
            raise
        raise replica._error(frag, "step", exc, item.iteration) from None
    seconds = time.perf_counter() - start
    replica._ran.add((frag, "step"))
    pieces = {}  # each written name split once (an action is both recorded and sent)

    def split(name):
        if name not in pieces:
            pieces[name] = split_rows(replica._written(frag, "step", ns, name, item.iteration), sizes)
        return pieces[name]

    for name, per in rows.items():
        for k, piece in zip(batch, split(name)):
            per[k].append(handed_over(piece))  # as it is now, as the lockstep loop keeps it
    sending, cpu = time.perf_counter(), time.thread_time()
    for send in replica._sends[frag]:
        for k, piece in zip(batch, split(send.name)):
            replica.peers.postman.send(
                (send.consumer_group, k), send.key, sent_base[send.key] + done[k], replica.index, piece
            )
    replica.step_send_seconds += time.perf_counter() - sending
    replica.step_send_cpu_seconds += time.thread_time() - cpu
    return seconds
