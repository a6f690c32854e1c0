"""The driver: wires the plan, starts one loop per group replica on a backend, and turns
the loops' task reports into finished iterations, in order.

A :class:`~workbench.runtime.engine.backend.Backend` decides where loops run — ``InlineBackend``
in this process (a thread per replica, :mod:`workbench.runtime.engine.inline`), the Dask backend
in ``workbench.cluster`` on workers; the driver calls the methods that contract declares,
and nothing else. It only sees small :class:`TaskReport`s; bulk data moves replica to
replica. What the reports mean — which complete an iteration, when the window is released,
where a stop lands — is decided by :class:`~workbench.runtime.engine.bookkeeping.Bookkeeping`, a pure
state machine; ``drive`` feeds it events and carries out its actions.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable

from workbench.errors import CellNotReturningError, SchedulerLostError, WorkerLostError
from workbench.fdg.plan import Plan
from workbench.runtime.engine.backend import Backend, Events, StreamSpec  # noqa: F401  (this module's API too)
from workbench.runtime.engine.bookkeeping import (
    Action,
    Bookkeeping,
    Fence,
    FenceAnswered,
    IterationRecord,
    LoopExited,
    Record,
    RecordAnswered,
    Release,
    SettleSnapshots,
    StopWithoutBoundary,
    TaskReported,
)
from workbench.runtime.replicas.env_objects import close_envs, is_env  # noqa: F401  (this module's API too)
from workbench.runtime.process.interrupts import shielded
from workbench.runtime.process.stall import Watchdog

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
#: (workbench.runtime.process.stall)
STALL_TIMEOUT_S = 30.0
#: under a synchronous policy, how many iterations past the first one not yet recorded a
#: replica may begin (plus the policy's ``lag``), so the boundary of a stop, a change or a
#: re-placement (one past the newest iteration begun) is at most this many + 1 past the
#: first iteration not recorded when it was decided. Unbounded, actors that read nothing
#: from the learner ran ahead to the end of the run, and the boundary was the run's end: a
#: stop at iteration 3 of 1000 trained on for 55 s (tests/cluster/test_stop_decoupled.py)
LOOKAHEAD = 8


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
    clip_every: int = 0,
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
    either: a long iteration steps or computes (:mod:`workbench.runtime.process.stall`).

    When ``on_iteration`` asks to stop and the backend is ``fenced``, the replicas are
    closed at one exact boundary first (:mod:`workbench.runtime.replicas.fence`): the iterations
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
    while they stop is held until they have (:mod:`workbench.runtime.process.interrupts`).
    """
    fenced = backend.fenced and not plan.policy.asynchronous  # the replicas wait for release()
    gated = lockstep and fenced
    # not in lockstep: a window of iterations released ahead, half of it at a time (a task
    # needs at most the iteration after the one the driver waits for: never held)
    window = LOOKAHEAD + plan.policy.lag if fenced and not gated else 0
    stream = StreamSpec(
        iterations, start, with_init, snapshot_every, full_snapshot_every, clip_every, gated, snapshot_paced
    )
    book = Bookkeeping(plan, stream, window)  # what the events mean: this function does the I/O
    events = Events(on_snapshot)
    last_check = time.monotonic()
    watchdog = Watchdog(STALL_TIMEOUT_S if stall_timeout is None else stall_timeout, backend.activity)

    def carry_out(actions: list[Action]) -> None:
        todo = deque(actions)
        while todo:
            action = todo.popleft()
            if isinstance(action, Release):
                backend.release(action.through)
            elif isinstance(action, SettleSnapshots):
                if backend.snapshots is not None:
                    backend.snapshots.settle(action.iteration)
            elif isinstance(action, Record):
                watchdog.iteration_done(time.monotonic())
                todo.extend(book.handle(RecordAnswered(bool(on_iteration(action.record)))))
            elif isinstance(action, Fence):
                todo.extend(book.handle(FenceAnswered(backend.fence(action.at))))
            elif isinstance(action, StopWithoutBoundary):
                _await_exits(backend, events, book.loops_left)
            # Done: the loop below sees book.finished

    carry_out(book.opening())  # before any loop starts: none begins past the window
    backend.start(plan, stream, events)
    if backend.snapshots is not None:
        backend.snapshots.settle(start)
    try:
        while not book.finished:
            if time.monotonic() - last_check > check_every:
                # a lost scheduler first (two attributes read): Dask cancelled every loop
                # with it, and asking it about workers would only wait for a reconnect
                _check_scheduler(backend, book.next_iteration)
                backend.check()  # a dead worker raises WorkerLostError here
                last_check = time.monotonic()
            try:
                event = events.queue.get(timeout=0.1)
            except queue.Empty:
                _check_silence(backend, book, watchdog, stopping)
                continue
            watchdog.heard(time.monotonic())
            if event[0] == "error":
                raise backend.failure(event[1])
            carry_out(book.handle(LoopExited(*event[1:]) if event[0] == "exit" else TaskReported(*event[1:])))
    except WorkerLostError as lost:
        if lost.iteration is None:  # the iteration its process was in, not the run's count
            try:
                lost.iteration = book.iteration_lost(set(lost.workers))
            except Exception:  # the loss is what matters: the trainer falls back to the run's count
                pass
        raise
    finally:
        with shielded("stopping the run's replicas"):  # a second Ctrl-C must not cut this short
            backend.stop()
    return book.next_iteration - start


def _check_silence(
    backend: Backend, book: Bookkeeping, watchdog: Watchdog, stopping: Callable[[], bool] | None
) -> None:
    """No event came: raise when the silence means a stuck cell after a stop, loops that
    all ended with reports still missing, or a stall."""
    now = time.monotonic()
    silent = watchdog.silent_for(now)
    if stopping is not None and stopping() and silent > STOP_GRACE_S:
        raise CellNotReturningError(backend.busy_cells(), STOP_GRACE_S)
    if book.loops_left == 0 and silent > TRAILING_REPORTS_S:
        _check_scheduler(backend, book.next_iteration)  # before check(): it asks the scheduler
        backend.check()
        raise RuntimeError(
            f"the run stalled at iteration {book.next_iteration}: every loop has "
            f"ended, and no report came in the {TRAILING_REPORTS_S:g} s after."
        )
    why = watchdog.stalled(time.monotonic()) if book.loops_left else None
    if why is not None:
        _check_scheduler(backend, book.next_iteration)
        backend.check()
        raise RuntimeError(_stalled(backend, book.next_iteration, silent, book.loops_left, why)) from None


def _check_scheduler(backend: Backend, iteration: int) -> None:
    """Asked only once a run looks stalled: raise :class:`SchedulerLostError` when the
    backend's client has lost its scheduler (its loops were cancelled with it), which
    explains the silence. A backend without a scheduler never loses one."""
    address = backend.scheduler_lost()
    if address is not None:
        raise SchedulerLostError(address, iteration)


def _stalled(backend: Backend, iteration: int, silent: float, loops: int, why: str) -> str:
    """The stall's error: how long it has been silent, and what is known of why."""
    text = (
        f"the run stalled at iteration {iteration}: no replica reported for {silent:.0f} s and {loops} "
        "loops are still alive"
    )
    if not why:
        return text + "."
    cells = backend.busy_cells()
    return (
        f"{text}, and {why}{' (' + '; '.join(cells) + ')' if cells else ''}. A cell that waits for "
        "what never comes (an event, a lock, another process) holds every replica that needs its "
        "values: fix the cell, or stop the run."
    )


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
