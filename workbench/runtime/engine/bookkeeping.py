"""The driver's bookkeeping as a pure state machine: task reports in, what to do out.

Which reports complete an iteration, when an iteration is recorded, when the window of
iterations ahead is released, where a stop lands and which iteration a lost worker's
replicas were in are decided here, from the plan's task stream and the events the driver
feeds in — no sockets, threads, clocks or backend (dask/distributed's
``WorkerState.handle_stimulus`` is the model). :func:`workbench.runtime.engine.driver.drive` is the
I/O around it: it takes events from the loops' queue, keeps the clock-based checks (lost
workers, stalls, a stop's grace), hands each event to :meth:`Bookkeeping.handle` and carries
out the actions it returns on the backend and ``on_iteration``.

Events: :class:`TaskReported`, :class:`LoopExited`, and the answers to two actions —
:class:`RecordAnswered` (``on_iteration`` asked to stop, or not) and
:class:`FenceAnswered` (the fence's boundary, or None). Actions: :class:`Release`,
:class:`SettleSnapshots`, :class:`Record`, :class:`Fence`, :class:`StopWithoutBoundary`,
:class:`Done`. A :class:`Record` or a :class:`Fence` is always the last action of a list:
the machine waits for its answer before it decides anything more.

Example — an actor+env group and a learner, two iterations; the second one's record stops:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.plan import make_plan
    >>> from workbench.fdg.policy import Group, Policy
    >>> fdg = Graph()
    >>> for name, code, rate in [("env", "obs = 0", "init"), ("actor", "act = obs", "step"),
    ...                          ("env", "obs = act", "step"), ("learner", "w = obs", "iteration")]:
    ...     _ = fdg.add_fragment(name, code, rate=rate)
    >>> plan = make_plan(fdg, Policy("p", (Group(("actor", "env"), 1, ("w0",)), Group(("learner",), 1, ("w1",)))))
    >>> book = Bookkeeping(plan, StreamSpec(2))  # tasks 0, 2: actor+env; 1, 3: learner
    >>> book.handle(TaskReported(0, TaskReport("actor+env", 0, "w0", iterations=[0])))
    []
    >>> book.handle(TaskReported(1, TaskReport("learner", 0, "w1", iterations=[0])))  # doctest: +ELLIPSIS
    [SettleSnapshots(iteration=1), Record(record=IterationRecord(iteration=0, ...))]
    >>> book.handle(RecordAnswered(stop=False))
    []
    >>> _ = book.handle(TaskReported(2, TaskReport("actor+env", 0, "w0", iterations=[1])))
    >>> [type(a).__name__ for a in book.handle(TaskReported(3, TaskReport("learner", 0, "w1", iterations=[1])))]
    ['SettleSnapshots', 'Record']
    >>> book.handle(RecordAnswered(stop=True))
    [Fence(at=2)]
    >>> book.handle(FenceAnswered(boundary=2))
    [Done(completed=2)]
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.fdg.plan import Plan
from workbench.fdg.wiring import WiredTask
from workbench.runtime.engine.backend import StreamSpec
from workbench.runtime.state.counting import RETURN_METRIC
from workbench.runtime.engine.in_flight import InFlight
from workbench.runtime.replicas.program import TaskReport
from workbench.runtime.state.run import IterationRecord

__all__ = [
    "Bookkeeping",
    "IterationRecord",
    "TaskReported",
    "LoopExited",
    "RecordAnswered",
    "FenceAnswered",
    "Release",
    "SettleSnapshots",
    "Record",
    "Fence",
    "StopWithoutBoundary",
    "Done",
    "Event",
    "Action",
]


def absorb(record: IterationRecord, report: TaskReport, *, with_timing: bool, of: int | None = None) -> None:
    """Add ``report``'s part of iteration ``of`` (default: the record's own) to ``record``."""
    of = record.iteration if of is None else of
    part = record.parts.setdefault((report.group, report.replica), {})
    for name, values in report.metrics.get(of, {}).items():
        part.setdefault(name, []).extend(values)
    record.env_steps += report.env_steps.get(of, 0)
    if of == max(report.iterations, default=of):  # once per report, however many iterations it spans
        record.env_steps_base += report.env_steps_base
    record.notes.extend(n for n in report.notes if n not in record.notes)
    record.shown.extend(name for name in report.shown if name not in record.shown)
    who = f"{report.group}[{report.replica}]"
    if of in report.env_steps:
        record.replica_env_steps[who] = record.replica_env_steps.get(who, 0) + report.env_steps[of]
    finished = len(report.metrics.get(of, {}).get(RETURN_METRIC, ()))
    if finished:
        record.replica_episodes[who] = record.replica_episodes.get(who, 0) + finished
    if with_timing:
        record.wire_bytes += report.sent_bytes
        for frag, seconds in report.compute_seconds.items():
            record.compute_seconds[frag] = record.compute_seconds.get(frag, 0.0) + seconds
        for kind, seconds in (
            ("wait", report.wait_seconds),
            ("send", report.send_seconds),
            ("send_cpu", report.send_cpu_seconds),
            ("compute", sum(report.compute_seconds.values())),
            ("other", report.other_seconds),
        ):
            name = f"{report.group}[{report.replica}] {kind}"
            record.comm_seconds[name] = record.comm_seconds.get(name, 0.0) + seconds


# -- events: what happened -------------------------------------------------------------
@dataclass(frozen=True)
class TaskReported:
    """Replica ``report.replica`` of group ``report.group`` finished task ``task``."""

    task: int
    report: TaskReport


@dataclass(frozen=True)
class LoopExited:
    """A replica's loop ended."""

    group: str
    replica: int


@dataclass(frozen=True)
class RecordAnswered:
    """The answer to a :class:`Record`: whether ``on_iteration`` asked to stop."""

    stop: bool


@dataclass(frozen=True)
class FenceAnswered:
    """The answer to a :class:`Fence`: the iteration the replicas stop before, or None
    when the backend has no exact boundary."""

    boundary: int | None


Event = TaskReported | LoopExited | RecordAnswered | FenceAnswered


# -- actions: what the driver is to do -------------------------------------------------
@dataclass(frozen=True)
class Release:
    """``backend.release(through)``: the replicas may begin iterations up to ``through``."""

    through: int


@dataclass(frozen=True)
class SettleSnapshots:
    """``backend.snapshots.settle(iteration)``: every iteration before it is recorded."""

    iteration: int


@dataclass(frozen=True)
class Record:
    """Give ``record`` to ``on_iteration``; answer with :class:`RecordAnswered`."""

    record: IterationRecord


@dataclass(frozen=True)
class Fence:
    """``backend.fence(at)``: close the replicas at an exact boundary; answer with
    :class:`FenceAnswered`."""

    at: int


@dataclass(frozen=True)
class StopWithoutBoundary:
    """A stop with no boundary (asynchronous): stop the loops and wait for them to exit."""


@dataclass(frozen=True)
class Done:
    """Every iteration up to the run's end (or its stop) is recorded: ``completed`` of them."""

    completed: int


Action = Release | SettleSnapshots | Record | Fence | StopWithoutBoundary | Done


class Bookkeeping:
    """The driver's decisions over one stretch: ``stream`` (from ``stream.start``, its
    ``lockstep``) of ``plan``, with ``window`` iterations released ahead (0: no window)."""

    def __init__(self, plan: Plan, stream: StreamSpec, window: int = 0) -> None:
        self.plan = plan
        self.start = stream.start
        self._run_end = stream.start + stream.iterations
        #: gated: no replica begins an iteration before the one before it is recorded
        self.gated = stream.lockstep
        self.window = window
        #: the newest iteration released (with a window)
        self.released = self.start + window
        #: the first iteration not recorded yet
        self.next_iteration = self.start
        #: lowered to the fence's boundary when a stop is asked for
        self.end = self._run_end
        #: a stop without a boundary (asynchronous): wait for the loops to end
        self.unbounded_stop = False
        self.loops_left = sum(g.replicas for g in plan.groups.values())
        self.in_flight = InFlight(plan)  # which iteration a lost worker's replicas were in
        self._pending = stream.tasks(plan)  # walked a little ahead of the loops
        self._tasks: dict[int, WiredTask] = {}  # walked, not yet reported by every replica
        self._outstanding: dict[int, int] = {}  # iteration → reports it still waits for
        self._reports_left: dict[int, int] = {}  # task → reports it still waits for
        self._records: dict[int, IterationRecord] = {}
        self._horizon = self.start - 1  # every task touching iterations ≤ horizon has been counted
        self._waiting: type | None = None  # the answer the machine waits for, if any

    @property
    def finished(self) -> bool:
        """Whether every iteration up to the end (lowered by a stop) is recorded."""
        return self.next_iteration >= self.end

    def opening(self) -> list[Action]:
        """What to do before any loop starts: none begins past the window."""
        return [Release(self.released)] if self.window else []

    def handle(self, event: Event) -> list[Action]:
        """Take one event; return what to do, in order."""
        if self._waiting is not None and not isinstance(event, self._waiting):
            raise RuntimeError(f"the driver's bookkeeping waits for {self._waiting.__name__}, not {event!r}")
        self._waiting = None
        if isinstance(event, LoopExited):
            self.loops_left -= 1
            return []
        if isinstance(event, TaskReported):
            return self._reported(event.task, event.report)
        if isinstance(event, RecordAnswered):
            return self._answered(event.stop)
        if isinstance(event, FenceAnswered):
            return self._fenced(event.boundary)
        raise TypeError(f"not an event of the driver's bookkeeping: {event!r}")

    def iteration_lost(self, workers: set[str]) -> int | None:
        """The iteration the replicas on ``workers`` were in when their process was lost."""
        if self.in_flight.newest_reported is not None:
            self._count_through(self.in_flight.newest_reported + 1)  # the replicas' next tasks
        return self.in_flight.iteration_on(workers, self._tasks)

    # -- the transitions ---------------------------------------------------------------
    def _reported(self, index: int, report: TaskReport) -> list[Action]:
        while index not in self._tasks:
            if self._horizon >= self._run_end:
                raise RuntimeError(f"a replica reported task {index}, which the plan does not have")
            self._count_through(self._horizon + 1)
        task = self._tasks[index]
        self.in_flight.reported(task.index, report.group, report.replica, report.iterations)
        self._reports_left[index] = self._reports_left.get(index, _reports_of(self.plan, task)) - 1
        if self._reports_left[index] == 0:
            del self._tasks[index], self._reports_left[index]
        its = report.iterations  # an async answer counts toward its sender's iteration
        self._count_through(max(its, default=self.start))
        for it in its:
            # gated, a task's head of an iteration already recorded lands in the next
            into = max(it, self.next_iteration)
            absorb(self._records.setdefault(into, IterationRecord(into)), report, with_timing=it == its[-1], of=it)
        for it in self._counted(task) if self.gated else its:
            self._outstanding[it] -= 1
        self._count_through(self.next_iteration + 1)
        return self._advance()

    def _advance(self) -> list[Action]:
        """Record the next iteration if every report it waits for is in."""
        if self.next_iteration < self.end and self._outstanding.get(self.next_iteration) == 0:
            record = self._records.pop(self.next_iteration)
            self.next_iteration += 1
            self._count_through(self.next_iteration + 1)
            self._waiting = RecordAnswered
            return [SettleSnapshots(self.next_iteration), Record(record)]  # a resume starts no later
        return [Done(self.next_iteration - self.start)] if self.finished else []

    def _answered(self, stop: bool) -> list[Action]:
        if stop and self.end == self._run_end:  # the first stop asked for
            self._waiting = FenceAnswered
            return [Fence(self.next_iteration)]
        actions: list[Action] = []
        if self.gated:
            actions.append(Release(self.next_iteration))  # decided: the replicas may begin it
        elif self.window and self.next_iteration + self.window - self.released >= (self.window + 1) // 2:
            self.released = self.next_iteration + self.window
            actions.append(Release(self.released))
        return actions + self._advance()

    def _fenced(self, boundary: int | None) -> list[Action]:
        if boundary is None:
            self.unbounded_stop, self.end = True, self.next_iteration
            return [StopWithoutBoundary(), Done(self.next_iteration - self.start)]
        self.end = min(self.end, boundary)
        for index, waiting in list(self._tasks.items()):  # tasks past the boundary never run
            if waiting.iteration is not None and waiting.iteration >= self.end:
                left = self._reports_left.pop(index, _reports_of(self.plan, waiting))
                for it in self._counted(waiting):
                    self._outstanding[it] -= left
                del self._tasks[index]
        return self._advance()

    # -- walking the task stream -------------------------------------------------------
    def _counted(self, task: WiredTask) -> list[int]:
        # gated, a task counts toward its own (last) iteration alone: one that opens with
        # the closing cells of the iteration before (an actor loading new weights) waits at
        # the gate, and the iteration before must be recordable without it
        if self.gated:
            return [task.iteration] if task.iteration is not None else []
        return _iterations_of(task)

    def _count_through(self, iteration: int) -> None:
        while self._horizon < iteration:
            task = next(self._pending, None)
            if task is None or (task.iteration is not None and task.iteration >= self.end):
                self._horizon = self._run_end  # past a fence's boundary nothing runs
                return
            self._tasks[task.index] = task
            self.in_flight.walked(task)
            for it in self._counted(task):
                self._outstanding[it] = self._outstanding.get(it, 0) + _reports_of(self.plan, task)
            if task.iteration is not None:
                self._horizon = max(self._horizon, task.iteration - 1)


def _reports_of(plan: Plan, task: WiredTask) -> int:
    """How many reports a task sends: one per replica — and an asynchronous consumer runs
    once per arriving producer replica's value."""
    arrivals = [w for w in task.inputs if w.arrival]
    runs = plan.groups[arrivals[0].producer_group].replicas if arrivals else 1
    return plan.groups[task.spec.group].replicas * runs


def _iterations_of(task: WiredTask) -> list[int]:
    return sorted({i.iteration for i in task.spec.items if i.iteration is not None})
