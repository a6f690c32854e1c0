"""The driver: wires the plan, starts one loop per group replica on a backend, and turns
the loops' task reports into finished iterations, in order.

A :class:`~workbench.runtime.backend.Backend` decides where loops run — ``InlineBackend``
in this process (a thread per replica, :mod:`workbench.runtime.inline`), the Dask backend
in ``workbench.cluster`` on workers; the driver calls the methods that contract declares,
and nothing else. It only sees small :class:`TaskReport`s; bulk data moves replica to
replica.
"""
from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.errors import CellNotReturningError, SchedulerLostError, WorkerLostError
from workbench.fdg.plan import Plan
from workbench.fdg.wiring import WiredTask
from workbench.runtime.backend import Backend, Events, StreamSpec  # noqa: F401  (this module's API too)
from workbench.runtime.counting import RETURN_METRIC
from workbench.runtime.env_objects import close_envs, is_env  # noqa: F401  (this module's API too)
from workbench.runtime.in_flight import InFlight
from workbench.runtime.interrupts import shielded
from workbench.runtime.replica import TaskReport
from workbench.runtime.stall import Watchdog

__all__ = ["Backend", "IterationRecord", "StreamSpec", "drive", "Events", "close_envs"]

#: how long a stop waits for the cells running to return before it names them and
#: abandons their replicas
STOP_GRACE_S = 10.0
#: once every loop has exited, how long reports still on their way may take: on a cluster
#: they come over the driver's channel while exits come through Dask, and the two can
#: arrive in either order on a busy machine
TRAILING_REPORTS_S = 2.0
#: how long no replica may report, nor make progress (finish a step, compute in its loop's
#: thread), before the run is stalled; a run's deadline grows with its longest iteration
#: (workbench.runtime.stall)
STALL_TIMEOUT_S = 30.0
#: under a synchronous policy, how many iterations past the first one not yet recorded a
#: replica may begin (plus the policy's ``lag``), so the boundary of a stop, a change or a
#: re-placement (one past the newest iteration begun) is at most this many + 1 past the
#: first iteration not recorded when it was decided. Unbounded, actors that read nothing
#: from the learner ran ahead to the end of the run, and the boundary was the run's end: a
#: stop at iteration 3 of 1000 trained on for 55 s (tests/cluster/test_stop_decoupled.py)
LOOKAHEAD = 8


@dataclass
class IterationRecord:
    """Everything the notebook learns about one finished iteration."""

    iteration: int
    env_steps: int = 0
    metrics: dict[str, list[float]] = field(default_factory=dict)
    compute_seconds: dict[str, float] = field(default_factory=dict)
    #: "group[replica] KIND" → seconds, KIND: wait, send, compute (its cells), other (the rest)
    comm_seconds: dict[str, float] = field(default_factory=dict)
    #: bytes sent between processes by the tasks that finished this iteration
    wire_bytes: int = 0
    #: env steps counted before this stretch (a resumed run's), reported by env replicas
    env_steps_base: int = 0
    #: per "group[replica]": env steps it took, and episodes it finished (returns logged)
    replica_env_steps: dict[str, int] = field(default_factory=dict)
    replica_episodes: dict[str, int] = field(default_factory=dict)
    #: warnings replicas sent with their reports: (the run's event kind, the message)
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: metric names logged with ``prog_bar=True`` (the progress shows them), first logged first
    shown: list[str] = field(default_factory=list)
    #: (group, replica) → its metrics as its reports came; `settle` moves them to ``metrics``
    parts: dict[tuple[str, int], dict[str, list]] = field(default_factory=dict, repr=False)

    def absorb(self, report: TaskReport, *, with_timing: bool, of: int | None = None) -> None:
        """Add ``report``'s part of iteration ``of`` (default: this record's own)."""
        of = self.iteration if of is None else of
        part = self.parts.setdefault((report.group, report.replica), {})
        for name, values in report.metrics.get(of, {}).items():
            part.setdefault(name, []).extend(values)
        self.env_steps += report.env_steps.get(of, 0)
        if of == max(report.iterations, default=of):  # once per report, however many iterations it spans
            self.env_steps_base += report.env_steps_base
        self.notes.extend(n for n in report.notes if n not in self.notes)
        self.shown.extend(name for name in report.shown if name not in self.shown)
        who = f"{report.group}[{report.replica}]"
        if of in report.env_steps:
            self.replica_env_steps[who] = self.replica_env_steps.get(who, 0) + report.env_steps[of]
        finished = len(report.metrics.get(of, {}).get(RETURN_METRIC, ()))
        if finished:
            self.replica_episodes[who] = self.replica_episodes.get(who, 0) + finished
        if with_timing:
            self.wire_bytes += report.sent_bytes
            for frag, seconds in report.compute_seconds.items():
                self.compute_seconds[frag] = self.compute_seconds.get(frag, 0.0) + seconds
            for kind, seconds in (("wait", report.wait_seconds), ("send", report.send_seconds),
                                  ("send_cpu", report.send_cpu_seconds),
                                  ("compute", sum(report.compute_seconds.values())),
                                  ("other", report.other_seconds)):
                name = f"{report.group}[{report.replica}] {kind}"
                self.comm_seconds[name] = self.comm_seconds.get(name, 0.0) + seconds


    def settle(self) -> None:
        """Append the replicas' metrics to ``metrics`` in (group, replica) order, not in the
        order their reports came: the same seed then gives the same lists (the run's last 20
        episodes, a mean over learner replicas summed in one order) under every timing."""
        for _, part in sorted(self.parts.items()):
            for name, values in part.items():
                self.metrics.setdefault(name, []).extend(values)
        self.parts.clear()


def drive(
    plan: Plan,
    backend: Backend,
    iterations: int,
    on_iteration: Callable[[IterationRecord], bool],
    *,
    start: int = 0,
    with_init: bool = True,
    stall_timeout: float | None = None,
    snapshot_every: int = 0,
    full_snapshot_every: int = 0,
    on_snapshot=None,
    check_every: float = 1.0,
    stopping: Callable[[], bool] | None = None,
    lockstep: bool = False,
    snapshot_paced: bool = False,
) -> int:
    """Run ``iterations`` iterations. ``on_iteration`` gets each finished iteration in
    order and returns True to stop early. Returns the number of iterations completed.

    Every ``check_every`` seconds the backend's ``check`` looks for lost workers (dead, or
    alive and unreachable: a WorkerLostError), whether or not the run is silent. The run
    is stalled when no loop has reported for ``stall_timeout`` seconds (default
    ``STALL_TIMEOUT_S``, growing with the longest iteration) and none made progress in them
    either: a long iteration steps or computes (:mod:`workbench.runtime.stall`).

    When ``on_iteration`` asks to stop and the backend is ``fenced``, the replicas are
    closed at one exact boundary first (:mod:`workbench.runtime.fence`): the iterations
    they had begun are finished and recorded too (``on_iteration``'s answer then no longer
    matters), so the state collected afterwards is the state at the last recorded one.
    With ``lockstep`` no replica begins an iteration before the one before it is recorded,
    so that boundary is right after the iteration whose record asked to stop (a run with a
    ``target_return`` stops at the iteration that met it). Under an asynchronous policy
    (no boundary) the loops stop after the task in hand, and ``drive`` returns once they
    have: the env replicas' own counters are then final (the trainer counts from them the
    steps of iterations left unfinished, docs/counting.md).

    Without ``lockstep`` a synchronous run's replicas may begin at most :data:`LOOKAHEAD`
    (+ the policy's ``lag``) iterations past the first one not yet recorded: the driver
    releases the window as rows come (``Backend.release``, every half window: one
    ``client.run`` per four iterations on a cluster), so wherever a stop is decided, the
    boundary is at most that far past it.

    ``stopping`` says a stop was asked for: if then no replica reports for
    ``STOP_GRACE_S``, a cell is stuck, and :class:`CellNotReturningError` names it.

    Ctrl-C (KeyboardInterrupt) stops every loop before it propagates; a second one
    while they stop is held until they have (:mod:`workbench.runtime.interrupts`).
    """
    fenced = backend.fenced and not plan.policy.asynchronous  # the replicas wait for release()
    gated = lockstep and fenced
    # not in lockstep: a window of iterations released ahead, half of it at a time (a task
    # needs at most the iteration after the one the driver waits for: never held)
    window = LOOKAHEAD + plan.policy.lag if fenced and not gated else 0
    released = start + window
    stream = StreamSpec(iterations, start, with_init, snapshot_every, full_snapshot_every, gated, snapshot_paced)
    pending = stream.tasks(plan)  # the driver walks the stream too, a little ahead of the loops
    tasks: dict[int, WiredTask] = {}
    outstanding: dict[int, int] = {}
    in_flight = InFlight(plan)  # which iteration a lost worker's replicas were in
    horizon = start - 1  # every task touching iterations ≤ horizon has been counted

    def counted(task: WiredTask) -> list[int]:
        # gated, a task counts toward its own (last) iteration alone: one that opens with
        # the closing cells of the iteration before (an actor loading new weights) waits at
        # the gate, and the iteration before must be recordable without it
        if gated:
            return [task.iteration] if task.iteration is not None else []
        return _iterations_of(task)

    def count_through(iteration: int) -> None:
        nonlocal horizon
        while horizon < iteration:
            task = next(pending, None)
            if task is None or (task.iteration is not None and task.iteration >= end):
                horizon = start + iterations  # past a fence's boundary nothing runs
                return
            tasks[task.index] = task
            in_flight.walked(task)
            for it in counted(task):
                outstanding[it] = outstanding.get(it, 0) + _reports_of(plan, task)
            if task.iteration is not None:
                horizon = max(horizon, task.iteration - 1)

    reports_left: dict[int, int] = {}
    loops_left = sum(g.replicas for g in plan.groups.values())
    records: dict[int, IterationRecord] = {}
    events = Events(on_snapshot)
    next_iteration = start
    last_check = time.monotonic()
    watchdog = Watchdog(STALL_TIMEOUT_S if stall_timeout is None else stall_timeout, backend.activity)
    end = start + iterations  # lowered to the fence's boundary when a stop is asked for
    unbounded_stop = False  # a stop without a boundary (asynchronous): wait for the loops to end
    if window:
        backend.release(released)  # before any loop starts: none begins past the window
    backend.start(plan, stream, events)
    if backend.snapshots is not None:
        backend.snapshots.settle(start)
    try:
        while next_iteration < end:
            if time.monotonic() - last_check > check_every:
                # a lost scheduler first (two attributes read): Dask cancelled every loop
                # with it, and asking it about workers would only wait for a reconnect
                _check_scheduler(backend, next_iteration)
                backend.check()  # a dead worker raises WorkerLostError here
                last_check = time.monotonic()
            try:
                event = events.queue.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                silent = watchdog.silent_for(now)
                if stopping is not None and stopping() and silent > STOP_GRACE_S:
                    raise CellNotReturningError(backend.busy_cells(), STOP_GRACE_S)
                if loops_left == 0 and silent > TRAILING_REPORTS_S:
                    _check_scheduler(backend, next_iteration)  # before check(): it asks the scheduler
                    backend.check()
                    raise RuntimeError(f"the run stalled at iteration {next_iteration}: every loop has "
                                       f"ended, and no report came in the {TRAILING_REPORTS_S:g} s after.")
                why = watchdog.stalled(time.monotonic()) if loops_left else None
                if why is not None:
                    _check_scheduler(backend, next_iteration)
                    backend.check()
                    raise RuntimeError(_stalled(backend, next_iteration, silent, loops_left, why)) from None
                continue
            watchdog.heard(time.monotonic())
            if event[0] == "error":
                raise backend.failure(event[1])
            if event[0] == "exit":
                loops_left -= 1
                continue
            while event[1] not in tasks:
                if horizon >= start + iterations:
                    raise RuntimeError(f"a replica reported task {event[1]}, which the plan does not have")
                count_through(horizon + 1)
            task = tasks[event[1]]
            in_flight.reported(task.index, event[2].group, event[2].replica, event[2].iterations)
            reports_left[task.index] = reports_left.get(task.index, _reports_of(plan, task)) - 1
            if reports_left[task.index] == 0:
                del tasks[task.index], reports_left[task.index]
            its = event[2].iterations  # an async answer counts toward its sender's iteration
            count_through(max(its, default=start))
            for it in its:
                # gated, a task's head of an iteration already recorded lands in the next
                into = max(it, next_iteration)
                records.setdefault(into, IterationRecord(into)).absorb(event[2], with_timing=it == its[-1], of=it)
            for it in counted(task) if gated else its:
                outstanding[it] -= 1
            count_through(next_iteration + 1)
            while next_iteration < end and outstanding.get(next_iteration) == 0:
                record = records.pop(next_iteration)
                next_iteration += 1
                watchdog.iteration_done(time.monotonic())
                if backend.snapshots is not None:
                    backend.snapshots.settle(next_iteration)  # a resume starts no later
                count_through(next_iteration + 1)
                if on_iteration(record) and end == start + iterations:
                    boundary = backend.fence(next_iteration)  # None: no exact boundary
                    if boundary is None:
                        unbounded_stop, end = True, next_iteration
                        break
                    end = min(end, boundary)
                    for index, waiting in list(tasks.items()):  # tasks past the boundary never run
                        if waiting.iteration is not None and waiting.iteration >= end:
                            left = reports_left.pop(index, _reports_of(plan, waiting))
                            for it in counted(waiting):
                                outstanding[it] -= left
                            del tasks[index]
                elif gated:
                    backend.release(next_iteration)  # decided: the replicas may begin it
                elif window and next_iteration + window - released >= (window + 1) // 2:
                    released = next_iteration + window
                    backend.release(released)
        if unbounded_stop:
            _await_exits(backend, events, loops_left)
    except WorkerLostError as lost:
        if lost.iteration is None:  # the iteration its process was in, not the run's count
            try:
                if in_flight.newest_reported is not None:
                    count_through(in_flight.newest_reported + 1)  # the replicas' next tasks
                lost.iteration = in_flight.iteration_on(set(lost.workers), tasks)
            except Exception:  # the loss is what matters: the trainer falls back to the run's count
                pass
        raise
    finally:
        with shielded("stopping the run's replicas"):  # a second Ctrl-C must not cut this short
            backend.stop()
    return next_iteration - start


def _check_scheduler(backend: Backend, iteration: int) -> None:
    """Asked only once a run looks stalled: raise :class:`SchedulerLostError` when the
    backend's client has lost its scheduler (its loops were cancelled with it), which
    explains the silence. A backend without a scheduler never loses one."""
    address = backend.scheduler_lost()
    if address is not None:
        raise SchedulerLostError(address, iteration)


def _stalled(backend: Backend, iteration: int, silent: float, loops: int, why: str) -> str:
    """The stall's error: how long it has been silent, and what is known of why."""
    text = (f"the run stalled at iteration {iteration}: no replica reported for {silent:.0f} s and {loops} "
            "loops are still alive")
    if not why:
        return text + "."
    cells = backend.busy_cells()
    return (f"{text}, and {why}{' (' + '; '.join(cells) + ')' if cells else ''}. A cell that waits for "
            "what never comes (an event, a lock, another process) holds every replica that needs its "
            "values: fix the cell, or stop the run.")


def _await_exits(backend: Backend, events: Events, loops_left: int) -> None:
    """After a stop without a boundary: stop the loops and wait until every one has
    exited, so that what their last tasks did is done (and counted in the env replicas'
    own counters). A loop still busy after ``STOP_GRACE_S`` is left to the teardown, which
    then does not wait again."""
    backend.stop()
    deadline = time.monotonic() + STOP_GRACE_S
    while loops_left > 0:
        try:
            event = events.queue.get(timeout=0.05)
        except queue.Empty:
            if time.monotonic() > deadline:
                backend.overdue = True
                return
            continue
        if event[0] == "exit":
            loops_left -= 1
        # a report or an error after the stop (a loop cut short) changes nothing recorded


def _reports_of(plan: Plan, task: WiredTask) -> int:
    """How many reports a task sends: one per replica — and an asynchronous consumer runs
    once per arriving producer replica's value."""
    arrivals = [w for w in task.inputs if w.arrival]
    runs = plan.groups[arrivals[0].producer_group].replicas if arrivals else 1
    return plan.groups[task.spec.group].replicas * runs


def _iterations_of(task: WiredTask) -> list[int]:
    return sorted({i.iteration for i in task.spec.items if i.iteration is not None})
