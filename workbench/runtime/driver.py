"""The driver: wires the plan, starts one loop per group replica on a backend, and turns
the loops' task reports into finished iterations, in order.

A :class:`Backend` decides where loops run — :class:`InlineBackend` in this process (a
thread per replica), the Dask backend in ``workbench.cluster`` on workers. The driver only
sees small :class:`TaskReport`s; bulk data moves replica to replica.
"""
from __future__ import annotations

import pickle
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


from workbench.errors import CellNotReturningError
from workbench.fdg.plan import Plan
from workbench.fdg.wiring import WiredTask, wire_stream
from workbench.runtime.channels import LocalPostman, Mailbox, dumps_state
from workbench.runtime.counting import RETURN_METRIC
from workbench.runtime.fence import Fence, decide
from workbench.runtime.interrupts import shielded
from workbench.runtime.loop import run_loop
from workbench.runtime.randomness import Turns
from workbench.runtime.replica import GroupProgram, GroupReplica, TaskReport
from workbench.runtime.snapshots import DRIVER, SnapshotBook, snapshot_key

__all__ = ["Backend", "InlineBackend", "IterationRecord", "StreamSpec", "drive", "Events", "close_envs"]

#: how long a stop waits for the cells running to return before it names them and
#: abandons their replicas
STOP_GRACE_S = 10.0
#: once every loop has exited, how long reports still on their way may take: on a cluster
#: they come over the driver's channel while exits come through Dask, and the two can
#: arrive in either order on a busy machine
TRAILING_REPORTS_S = 2.0


class Events:
    """What loops tell the driver, from any thread: ``("report", task, TaskReport)``,
    ``("error", exception)`` or ``("exit", group, replica)``."""

    def __init__(self, on_snapshot=None) -> None:
        self.queue: queue.Queue = queue.Queue()
        #: ``on_snapshot(iteration, pickled)`` when every replica's snapshot of an
        #: iteration is in (see :class:`~workbench.runtime.snapshots.SnapshotBook`)
        self.on_snapshot = on_snapshot

    def report(self, task: int, report: TaskReport) -> None:
        self.queue.put(("report", task, report))

    def error(self, exc: BaseException) -> None:
        self.queue.put(("error", exc))

    def exit(self, group: str, replica: int) -> None:
        self.queue.put(("exit", group, replica))


class Backend(Protocol):
    """Where replicas live and their loops run."""

    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any],
               states: dict[tuple[str, int], dict] | None = None) -> None:
        """Create every replica (``states``: (group, index) → fragment states to resume)."""

    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        """Every replica's fragment states, once the loops have stopped."""

    def start(self, plan: Plan, stream: "StreamSpec", events: Events) -> None:
        """Start every replica's loop over ``stream``; loops report through ``events``."""

    def stop(self) -> None:
        """Ask every loop to stop after its current task (non-blocking)."""

    def teardown(self) -> None:
        """Wait for loops to end and drop the replicas' state (envs closed, memory freed)."""

    def check(self) -> None:
        """Raise :class:`WorkerLostError` if a process holding replicas is gone (called by
        the driver about once a second)."""

    def failure(self, exc: BaseException) -> BaseException:
        """What a loop's error means: the error itself, or a :class:`WorkerLostError` when
        it came from a process that died."""

    # optional: ``probe(silent_for)``, called when no loop has reported for ``probe_after``
    # seconds; raises WorkerLostError for workers that are alive but do not answer


@dataclass(frozen=True)
class StreamSpec:
    """Which part of the loop to run; every replica generates the same wired task stream
    from it (:func:`~workbench.fdg.wiring.wire_stream`)."""

    iterations: int
    start: int = 0
    with_init: bool = True
    #: replicas send their learners' state to the driver every this many iterations,
    #: and every fragment's every ``full_snapshot_every`` (0: never)
    snapshot_every: int = 0
    full_snapshot_every: int = 0

    def tasks(self, plan: Plan) -> Iterator[WiredTask]:
        return wire_stream(plan, self.iterations, self.start, with_init=self.with_init)


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

    def absorb(self, report: TaskReport, *, with_timing: bool) -> None:
        for name, values in report.metrics.get(self.iteration, {}).items():
            self.metrics.setdefault(name, []).extend(values)
        self.env_steps += report.env_steps.get(self.iteration, 0)
        self.env_steps_base += report.env_steps_base
        self.notes.extend(n for n in report.notes if n not in self.notes)
        who = f"{report.group}[{report.replica}]"
        if self.iteration in report.env_steps:
            self.replica_env_steps[who] = self.replica_env_steps.get(who, 0) + report.env_steps[self.iteration]
        finished = len(report.metrics.get(self.iteration, {}).get(RETURN_METRIC, ()))
        if finished:
            self.replica_episodes[who] = self.replica_episodes.get(who, 0) + finished
        if with_timing:
            self.wire_bytes += report.sent_bytes
            for frag, seconds in report.compute_seconds.items():
                self.compute_seconds[frag] = self.compute_seconds.get(frag, 0.0) + seconds
            for kind, seconds in (("wait", report.wait_seconds), ("send", report.send_seconds),
                                  ("compute", sum(report.compute_seconds.values())),
                                  ("other", report.other_seconds)):
                name = f"{report.group}[{report.replica}] {kind}"
                self.comm_seconds[name] = self.comm_seconds.get(name, 0.0) + seconds


class InlineBackend:
    """Runs every replica in the calling process: one thread per replica loop, values
    handed over by reference."""

    def __init__(self) -> None:
        self.replicas: dict[tuple[str, int], GroupReplica] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.snapshots: SnapshotBook | None = None
        self._fence = Fence()
        self._asynchronous = False
        #: set when a stop already waited its grace for a stuck cell (teardown then doesn't)
        self.overdue = False

    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any],
               states: dict[tuple[str, int], dict] | None = None) -> None:
        turns = Turns()  # every replica is in this process: they take turns with its RNGs
        for name, group in plan.groups.items():
            for index in range(group.replicas):
                self.replicas[(name, index)] = GroupReplica(
                    programs[name], index, group.replicas, "local", notebook, group.device,
                    (states or {}).get((name, index)), turns)

    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        for thread in self._threads:
            thread.join()
        return {key: _detached(replica.export_state()) for key, replica in self.replicas.items()}

    def check(self) -> None:
        pass  # the calling process cannot lose itself

    def failure(self, exc: BaseException) -> BaseException:
        return exc

    def start(self, plan: Plan, stream: StreamSpec, events: Events) -> None:
        self._torch_threads = _limit_torch_threads(1)
        self._asynchronous = plan.policy.asynchronous
        boxes = {key: Mailbox(r.program.arrival_keys) for key, r in self.replicas.items()}
        postman = LocalPostman(boxes)
        counts = {name: g.replicas for name, g in plan.groups.items()}
        if stream.snapshot_every or stream.full_snapshot_every:
            self.snapshots = boxes[DRIVER] = SnapshotBook(counts, on_complete=events.on_snapshot)

        def loop(key: tuple[str, int]) -> None:
            replica = self.replicas[key]

            def snapshot(iteration: int, full: bool) -> None:
                postman.send(DRIVER, snapshot_key(key[0]), iteration, key[1], replica.snapshot_bytes(full))

            try:
                run_loop(replica, stream.tasks(plan), boxes[key], postman, counts, events.report,
                         self._stop.is_set, snapshot, stream.snapshot_every, stream.full_snapshot_every,
                         None if self._asynchronous else self._fence)
            except BaseException as exc:  # reported to the driver, which re-raises it
                self._stop.set()
                events.error(exc)
            finally:
                events.exit(*key)

        self._threads = [threading.Thread(target=loop, args=(key,), name=f"workbench-{key[0]}-{key[1]}",
                                          daemon=True) for key in self.replicas]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def fence(self, at_least: int) -> int | None:
        """Close every replica at one exact iteration boundary ≥ ``at_least``; return it
        (None under an asynchronous policy, whose replicas have no common iteration)."""
        if self._asynchronous:
            return None
        return decide([self._fence], at_least)

    def busy_cells(self) -> list[str]:
        """What each replica's cell is doing when a stop is overdue."""
        return [text for replica in self.replicas.values() if (text := replica.describe_busy())]

    def teardown(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + (1.0 if self.overdue else STOP_GRACE_S)
        stuck = []
        for key, thread in zip(list(self.replicas), self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():  # a cell that never returns: Python cannot kill a thread
                stuck.append(key)
        if stuck:
            cells = [self.replicas[k].describe_busy() or f"replica {k[1]} of {k[0]}" for k in stuck]
            print(f"workbench: {'; '.join(cells)}; its thread is abandoned (it finishes on its own, "
                  "holding nothing of the run) and the FDG is free.", flush=True)
        _limit_torch_threads(getattr(self, "_torch_threads", None))
        for key, replica in self.replicas.items():
            if key not in stuck:
                for ns in replica.namespaces.values():
                    close_envs(ns)
        self.replicas.clear()


def _limit_torch_threads(count: int | None) -> int | None:
    """Set torch's intra-op threads (if torch is loaded) and return the previous count.

    Small RL networks run fastest single-threaded, and a thread pool larger than the cores
    left free (the cluster, other loops) makes torch's spinning workers fight for them:
    we measured 40× slowdowns on a busy 2-core machine.
    """
    torch = sys.modules.get("torch")
    if torch is None or count is None:
        return None
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    return previous


def _detached(state: dict) -> dict:
    """A copy of a replica's state that outlives the replica (teardown closes its envs):
    a pickle round trip, or the objects themselves when something will not pickle."""
    try:
        return pickle.loads(dumps_state(state))
    except Exception:
        return state


def close_envs(ns: dict) -> None:
    """Close the environments a namespace holds (anything with reset, step and close)."""
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
    stall_timeout: float = 30.0,
    snapshot_every: int = 0,
    full_snapshot_every: int = 0,
    on_snapshot=None,
    check_every: float = 1.0,
    probe_after: float = 3.0,
    stopping: Callable[[], bool] | None = None,
) -> int:
    """Run ``iterations`` iterations. ``on_iteration`` gets each finished iteration in
    order and returns True to stop early. Returns the number of iterations completed.

    When no loop has reported for ``probe_after`` seconds (and every ``probe_after`` after
    that), a backend with a ``probe`` method checks that its workers still answer: an
    unreachable one ends the run with a WorkerLostError long before ``stall_timeout``.

    When ``on_iteration`` asks to stop and the backend has a ``fence``, the replicas are
    closed at one exact boundary first (:mod:`workbench.runtime.fence`): the iterations
    they had begun are finished and recorded too (``on_iteration``'s answer then no longer
    matters), so the state collected afterwards is the state at the last recorded one.

    ``stopping`` says a stop was asked for: if then no replica reports for
    ``STOP_GRACE_S``, a cell is stuck, and :class:`CellNotReturningError` names it.

    Ctrl-C (KeyboardInterrupt) stops every loop before it propagates; a second one
    while they stop is held until they have (:mod:`workbench.runtime.interrupts`).
    """
    stream = StreamSpec(iterations, start, with_init, snapshot_every, full_snapshot_every)
    pending = stream.tasks(plan)  # the driver walks the stream too, a little ahead of the loops
    tasks: dict[int, WiredTask] = {}
    outstanding: dict[int, int] = {}
    horizon = start - 1  # every task touching iterations ≤ horizon has been counted

    def count_through(iteration: int) -> None:
        nonlocal horizon
        while horizon < iteration:
            task = next(pending, None)
            if task is None or (task.iteration is not None and task.iteration >= end):
                horizon = start + iterations  # past a fence's boundary nothing runs
                return
            tasks[task.index] = task
            for it in _iterations_of(task):
                outstanding[it] = outstanding.get(it, 0) + _reports_of(plan, task)
            if task.iteration is not None:
                horizon = max(horizon, task.iteration - 1)

    reports_left: dict[int, int] = {}
    loops_left = sum(g.replicas for g in plan.groups.values())
    records: dict[int, IterationRecord] = {}
    events = Events(on_snapshot)
    next_iteration = start
    last_event = last_check = last_probe = time.monotonic()
    probe = getattr(backend, "probe", None)
    end = start + iterations  # lowered to the fence's boundary when a stop is asked for
    backend.start(plan, stream, events)
    if getattr(backend, "snapshots", None) is not None:
        backend.snapshots.settle(start)
    try:
        while next_iteration < end:
            if time.monotonic() - last_check > check_every:
                backend.check()  # a dead worker raises WorkerLostError here
                last_check = time.monotonic()
            try:
                event = events.queue.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                if stopping is not None and stopping() and now - last_event > STOP_GRACE_S:
                    busy = getattr(backend, "busy_cells", None)
                    raise CellNotReturningError(busy() if busy is not None else [], STOP_GRACE_S)
                if probe is not None and loops_left and min(now - last_event, now - last_probe) > probe_after:
                    probe(now - last_event)  # silence: is a worker cut off or frozen?
                    last_probe = time.monotonic()
                silent = time.monotonic() - last_event
                if (loops_left == 0 and silent > TRAILING_REPORTS_S) or silent > stall_timeout:
                    backend.check()
                    why = (f"every loop has ended, and no report came in the {TRAILING_REPORTS_S:g} s "
                           "after" if loops_left == 0 else
                           f"no replica reported for {stall_timeout:g} s and {loops_left} loops are still alive")
                    raise RuntimeError(f"the run stalled at iteration {next_iteration}: {why}.") from None
                continue
            last_event = time.monotonic()
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
            reports_left[task.index] = reports_left.get(task.index, _reports_of(plan, task)) - 1
            if reports_left[task.index] == 0:
                del tasks[task.index], reports_left[task.index]
            its = event[2].iterations  # an async answer counts toward its sender's iteration
            count_through(max(its, default=start))
            for it in its:
                records.setdefault(it, IterationRecord(it)).absorb(event[2], with_timing=it == its[-1])
                outstanding[it] -= 1
            count_through(next_iteration + 1)
            while next_iteration < end and outstanding.get(next_iteration) == 0:
                record = records.pop(next_iteration)
                next_iteration += 1
                if getattr(backend, "snapshots", None) is not None:
                    backend.snapshots.settle(next_iteration)  # a resume starts no later
                count_through(next_iteration + 1)
                if on_iteration(record) and end == start + iterations:
                    fence = getattr(backend, "fence", None)
                    boundary = fence(next_iteration) if fence is not None else None
                    if boundary is None:
                        return next_iteration - start
                    end = min(end, boundary)
                    for index, waiting in list(tasks.items()):  # tasks past the boundary never run
                        if waiting.iteration is not None and waiting.iteration >= end:
                            left = reports_left.pop(index, _reports_of(plan, waiting))
                            for it in _iterations_of(waiting):
                                outstanding[it] -= left
                            del tasks[index]
    finally:
        with shielded("stopping the run's replicas"):  # a second Ctrl-C must not cut this short
            backend.stop()
    return next_iteration - start


def _reports_of(plan: Plan, task: WiredTask) -> int:
    """How many reports a task sends: one per replica — and an asynchronous consumer runs
    once per arriving producer replica's value."""
    arrivals = [w for w in task.inputs if w.arrival]
    runs = plan.groups[arrivals[0].producer_group].replicas if arrivals else 1
    return plan.groups[task.spec.group].replicas * runs


def _iterations_of(task: WiredTask) -> list[int]:
    return sorted({i.iteration for i in task.spec.items if i.iteration is not None})
