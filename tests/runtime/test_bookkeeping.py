"""The driver's bookkeeping (:mod:`workbench.runtime.engine.bookkeeping`) driven through the
orderings that broke before, with no loops, sockets or clocks: reports late and out of
order, an asynchronous answer, a stop inside the release window, lockstep, a stop without
a boundary, and the iteration a lost worker was in.

The plan is the counters FDG, SingleLearnerCoarse with two acting replicas (on w0 and w1)
and the learner on w0. Its task stream, per iteration ``i``: the actors' task (their
``gain = scale`` of ``i - 1``, then the steps of ``i``), then the learner's. So iteration
``i`` is complete once both actors reported ``2i + 2``, the learner ``2i + 3``, and both
actors ``2i + 4`` (which opens with iteration ``i``'s cells) — unless in lockstep.
"""

from __future__ import annotations

import pytest

from workbench.algorithms.counters import build_fdg
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import Plan, make_plan
from workbench.fdg.policy import Async, SingleLearnerCoarse
from workbench.runtime.engine.backend import StreamSpec
from workbench.runtime.engine.bookkeeping import (
    Bookkeeping,
    Done,
    Fence,
    FenceAnswered,
    LoopExited,
    Record,
    RecordAnswered,
    Release,
    SettleSnapshots,
    StopWithoutBoundary,
    TaskReported,
)
from workbench.runtime.replicas.program import TaskReport

WORKERS = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1"), WorkerInfo("tcp://c:1", "w2")))
ACT, LEARN = "actor+env", "learner"


def _plan(policy=SingleLearnerCoarse) -> Plan:
    fdg = build_fdg()
    plan = make_plan(fdg, policy(actors=2).place(fdg, WORKERS))
    assert {g: plan.groups[g].workers for g in plan.groups} == {ACT: ("w0", "w1"), LEARN: ("w0",)}
    return plan


def _report(plan: Plan, group: str, replica: int, iterations: list[int], **metrics: float) -> TaskReport:
    """A report as replica ``replica`` of ``group`` sends it: each metric logged once in
    each iteration the task ran items of."""
    return TaskReport(
        group,
        replica,
        plan.groups[group].workers[replica],
        iterations=list(iterations),
        metrics={i: {name: [value] for name, value in metrics.items()} for i in iterations},
    )


def _task(book: Bookkeeping, task: int, group: str, iterations: list[int], replicas=None, **metrics) -> list:
    """Every replica of ``group`` (or those in ``replicas``) reports ``task``; the actions, in order."""
    actions = []
    for replica in range(book.plan.groups[group].replicas) if replicas is None else replicas:
        actions += book.handle(TaskReported(task, _report(book.plan, group, replica, iterations, **metrics)))
    return actions


def _recorded(actions: list) -> list[int]:
    return [a.record.iteration for a in actions if isinstance(a, Record)]


def _metrics(record: Record) -> dict[str, list[float]]:
    """The record's metrics as ``on_iteration`` reads them (settled: in replica order)."""
    record.record.settle()
    return record.record.metrics


def _init(book: Bookkeeping) -> None:
    assert _task(book, 0, ACT, []) == [] and _task(book, 1, LEARN, []) == []


def _complete(book: Bookkeeping, i: int, last: bool = False) -> list:
    """The reports iteration ``i`` still waits for once ``i - 1`` is complete: the actors'
    first task (for ``i == 0``), the learner's, and the actors' task that opens with
    ``i``'s cells (it steps ``i + 1``, unless ``last``)."""
    first = _task(book, 2, ACT, [0]) if i == 0 else []
    return first + _task(book, 2 * i + 3, LEARN, [i]) + _task(book, 2 * i + 4, ACT, [i] if last else [i, i + 1])


# -- completing an iteration -----------------------------------------------------------
def test_an_iteration_waits_for_the_actor_task_that_opens_with_its_cells():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(3))
    _init(book)
    assert _task(book, 2, ACT, [0]) + _task(book, 3, LEARN, [0]) == []  # `gain = scale` of 0 is in task 4
    assert _task(book, 4, ACT, [0, 1], replicas=[0]) == []
    actions = _task(book, 4, ACT, [0, 1], replicas=[1])
    assert actions == [SettleSnapshots(1), actions[1]] and _recorded(actions) == [0]
    assert book.handle(RecordAnswered(stop=False)) == [] and book.next_iteration == 1


def test_reports_arriving_late_and_out_of_order_across_iterations():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(3))
    _init(book)
    # iteration 1's reports come before iteration 0's last one (actor 1 lags), and a
    # report of task 6 walks the stream ahead to it
    actions = (
        _task(book, 2, ACT, [0], replicas=[0], r=1.0)
        + _task(book, 4, ACT, [0, 1], replicas=[0], r=2.0)
        + _task(book, 6, ACT, [1, 2], replicas=[0], r=4.0)
        + _task(book, 2, ACT, [0], replicas=[1], r=3.0)
        + _task(book, 5, LEARN, [1], loss=6.0)
        + _task(book, 3, LEARN, [0], loss=5.0)
        + _task(book, 6, ACT, [1, 2], replicas=[1], r=7.0)
    )
    assert actions == []  # iteration 0 still waits for actor 1's task 4
    actions = _task(book, 4, ACT, [0, 1], replicas=[1], r=8.0)
    assert _recorded(actions) == [0]
    # each replica's values in (group, replica) order, whatever order the reports came in
    assert _metrics(actions[-1]) == {"r": [1.0, 2.0, 3.0, 8.0], "loss": [5.0]}
    # iteration 1 was complete too: it is recorded once the first record is answered
    actions = book.handle(RecordAnswered(stop=False))
    assert actions[0] == SettleSnapshots(2) and _recorded(actions) == [1]
    assert _metrics(actions[-1]) == {"r": [2.0, 4.0, 7.0, 8.0], "loss": [6.0]}
    assert book.handle(RecordAnswered(stop=False)) == []  # iteration 2 waits for its learner


def test_a_report_of_a_task_the_plan_does_not_have_is_an_error():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(2))
    with pytest.raises(RuntimeError, match="task 99"):
        book.handle(TaskReported(99, _report(plan, LEARN, 0, [1])))


def test_no_report_is_taken_while_a_record_waits_for_its_answer():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(3))
    _init(book)
    assert _recorded(_complete(book, 0)) == [0]
    with pytest.raises(RuntimeError, match="waits for RecordAnswered"):
        book.handle(TaskReported(5, _report(plan, LEARN, 0, [1])))


def test_the_whole_run_is_recorded_then_done():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(2))
    _init(book)
    seen = []
    for i in range(2):
        seen += _complete(book, i, last=i == 1)
        seen += book.handle(RecordAnswered(stop=False))
    assert _recorded(seen) == [0, 1] and seen[-1] == Done(2) and book.finished
    assert book.handle(LoopExited(ACT, 0)) == [] and book.loops_left == 2


# -- an asynchronous answer ------------------------------------------------------------
def test_an_async_answer_counts_toward_its_senders_iteration():
    plan = _plan(Async)
    book = Bookkeeping(plan, StreamSpec(3))
    _init(book)
    assert _task(book, 2, ACT, [0]) == []
    assert _task(book, 4, ACT, [0, 1], replicas=[0]) + _task(book, 6, ACT, [1, 2], replicas=[0]) == []
    # the learner runs once per arriving actor value (two reports a task): actor 0 is
    # ahead, so task 3 answers its values of iterations 0 and 1, and task 5's first run
    # answers actor 1's value of iteration 0
    assert _task(book, 3, LEARN, [0]) + _task(book, 3, LEARN, [1]) == []
    assert _task(book, 5, LEARN, [0], loss=9.0) == []
    actions = _task(book, 4, ACT, [0, 1], replicas=[1])
    assert _recorded(actions) == [0]
    assert _metrics(actions[-1]) == {"loss": [9.0]}  # in the iteration its sender was in
    assert book.handle(RecordAnswered(stop=False)) == []


def test_a_stop_without_a_boundary_ends_at_the_iteration_recorded():
    plan = _plan(Async)
    book = Bookkeeping(plan, StreamSpec(10))
    _init(book)
    assert _task(book, 2, ACT, [0]) + _task(book, 3, LEARN, [0], replicas=[0, 0]) == []
    assert _recorded(_task(book, 4, ACT, [0, 1])) == [0]
    assert book.handle(RecordAnswered(stop=True)) == [Fence(1)]
    assert book.handle(FenceAnswered(None)) == [StopWithoutBoundary(), Done(1)]
    assert book.finished and book.unbounded_stop and book.end == 1


# -- the release window and a stop inside it -------------------------------------------
def test_the_window_is_released_half_a_window_at_a_time():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(20), window=8)
    assert book.opening() == [Release(8)]
    _init(book)
    released = []
    for i in range(5):
        assert _recorded(_complete(book, i)) == [i]
        released += book.handle(RecordAnswered(stop=False))
    assert released == [Release(12)]  # once 4 were recorded (half the window), 4 more
    assert book.released == 12


def test_a_stop_inside_the_window_drops_the_tasks_past_its_boundary_and_records_those_before():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(20), window=8)
    _init(book)
    # the replicas ran ahead: actor 0 in iteration 2, the learner done with 1
    actions = (
        _task(book, 2, ACT, [0])
        + _task(book, 3, LEARN, [0])
        + _task(book, 4, ACT, [0, 1], replicas=[0])
        + _task(book, 5, LEARN, [1])
        + _task(book, 6, ACT, [1, 2], replicas=[0])
        + _task(book, 4, ACT, [0, 1], replicas=[1])
    )
    assert _recorded(actions) == [0]
    assert book.handle(RecordAnswered(stop=True)) == [Fence(1)]
    # the fence: the replicas had begun iteration 2, so they stop before 3
    assert book.handle(FenceAnswered(boundary=3)) == [] and book.end == 3
    actions = _task(book, 6, ACT, [1, 2], replicas=[1])
    assert _recorded(actions) == [1]
    assert book.handle(RecordAnswered(stop=True)) == []  # a second stop: no second fence, no release
    # iteration 2 needs its learner, not the actors' task 8 (iteration 3: it never runs)
    actions = _task(book, 7, LEARN, [2])
    assert _recorded(actions) == [2]
    assert book.handle(RecordAnswered(stop=False)) == [Done(3)] and book.finished
    with pytest.raises(RuntimeError, match="task 9"):  # nothing past the boundary is walked
        book.handle(TaskReported(9, _report(plan, LEARN, 0, [3])))


def test_a_fence_at_the_iteration_recorded_is_done_at_once():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(20), window=8)
    _init(book)
    assert _recorded(_complete(book, 0)) == [0]
    assert book.handle(RecordAnswered(stop=True)) == [Fence(1)]
    assert book.handle(FenceAnswered(boundary=1)) == [Done(1)] and book.finished


# -- lockstep --------------------------------------------------------------------------
def test_lockstep_records_without_the_next_task_and_releases_each_iteration():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(3, lockstep=True))
    assert book.opening() == []
    _init(book)
    # gated, the actors' task 4 counts toward iteration 1 alone: it waits at the gate
    actions = _task(book, 2, ACT, [0], r=1.0) + _task(book, 3, LEARN, [0])
    assert _recorded(actions) == [0]
    assert book.handle(RecordAnswered(stop=False)) == [Release(1)]
    # its head (iteration 0's cells) lands in iteration 1's record: 0 is recorded
    assert _task(book, 4, ACT, [0, 1], r=2.0) == []
    actions = _task(book, 5, LEARN, [1])
    assert _recorded(actions) == [1] and _metrics(actions[-1]) == {"r": [2.0, 2.0, 2.0, 2.0]}
    assert book.handle(RecordAnswered(stop=False)) == [Release(2)]


def test_a_stop_in_lockstep_lands_right_after_the_iteration_that_asked():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(10, lockstep=True))
    _init(book)
    assert _recorded(_task(book, 2, ACT, [0]) + _task(book, 3, LEARN, [0])) == [0]
    assert book.handle(RecordAnswered(stop=True)) == [Fence(1)]
    # the actors' task 4 (iteration 1) waited at the gate: dropped, never reported
    assert book.handle(FenceAnswered(boundary=1)) == [Done(1)] and book.finished


# -- a lost worker ---------------------------------------------------------------------
def test_the_iteration_a_lost_workers_replicas_were_in():
    plan = _plan()
    book = Bookkeeping(plan, StreamSpec(5))
    _init(book)
    _task(book, 2, ACT, [0])
    # the learner (w0) computes iteration 0; both actors wait for its weights
    assert book.iteration_lost({"w0"}) == 0
    assert book.iteration_lost({"w1"}) == 1  # none had begun: the iteration it would begin next
    _task(book, 3, LEARN, [0])
    assert book.iteration_lost({"w1"}) == 1  # actor 1 steps iteration 1
    _task(book, 4, ACT, [0, 1], replicas=[0])
    _task(book, 5, LEARN, [1])
    assert book.iteration_lost({"w0"}) == 2  # actor 0 steps iteration 2
