"""The backend contract: where a run's replicas live and their loops run.

The driver (:func:`workbench.runtime.engine.driver.drive`) deploys, starts, paces, checks and stops a
run's replicas through one :class:`Backend`, and hears from their loops through
:class:`Events`; a :class:`StreamSpec` says which part of the loop they run. Two backends
implement it: ``InlineBackend`` (this process, a thread per replica:
:mod:`workbench.runtime.engine.inline`) and ``DaskBackend`` (a long-lived task per replica on a
Dask worker: :mod:`workbench.cluster.backend`). Both run each replica's loop with
:func:`run_replica`.

What every backend must do is abstract; what only some can do (an exact iteration
boundary, a view of each replica's progress, a scheduler to lose, a dashboard page) has a
default that says "not here", so the driver calls every method and never asks what a
backend has. A backend's life, as the driver and the trainer use it::

    backend.deploy(plan, programs, notebook, states)  # every replica, with its state
    backend.start(plan, stream, events)               # one loop per replica: reports, errors, exits
    backend.check()                                   # about once a second while they run
    backend.stop()                                    # the loops end after the task in hand
    states = backend.export()                         # where a next stretch continues
    backend.teardown()                                # always, last

A backend that leaves out what every backend must do cannot be made:

    >>> class HalfDone(Backend):
    ...     def check(self) -> None: ...
    >>> HalfDone()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: Can't instantiate abstract class HalfDone ...
"""

from __future__ import annotations

import queue
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.fdg.plan import Plan
from workbench.fdg.wiring import WiredTask, wire_stream
from workbench.runtime.replicas.fence import Fence
from workbench.runtime.replicas.loop import run_loop
from workbench.runtime.transport.mailbox import Mailbox
from workbench.runtime.replicas.replica import GroupProgram, GroupReplica, TaskReport
from workbench.runtime.state.snapshots import DRIVER, SnapshotBook, snapshot_key
from workbench.runtime.process.stall import Activity

__all__ = ["Backend", "Events", "StreamSpec", "run_replica"]


class Events:
    """What loops tell the driver, from any thread: ``("report", task, TaskReport)``,
    ``("error", exception)`` or ``("exit", group, replica)``.

        >>> events = Events()
        >>> events.exit("learner", 0)
        >>> events.queue.get_nowait()
        ('exit', 'learner', 0)
    """

    def __init__(self, on_snapshot=None) -> None:
        self.queue: queue.Queue = queue.Queue()
        #: ``on_snapshot(iteration, pickled)`` when every replica's snapshot of an
        #: iteration is in (see :class:`~workbench.runtime.state.snapshots.SnapshotBook`)
        self.on_snapshot = on_snapshot

    def report(self, task: int, report: TaskReport) -> None:
        self.queue.put(("report", task, report))

    def error(self, exc: BaseException) -> None:
        self.queue.put(("error", exc))

    def exit(self, group: str, replica: int) -> None:
        self.queue.put(("exit", group, replica))


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
    #: every fragment's also every this many iterations: the states a run's clips are
    #: played from (``--video-every``; 0: none)
    clip_every: int = 0
    #: no replica begins an iteration before the driver has recorded the one before and
    #: released it (``Backend.release``): a stop decided on an iteration lands right after it
    lockstep: bool = False
    #: the light snapshots keep to a share of the iterations' time (``snapshot_every`` was
    #: left to workbench: :mod:`workbench.runtime.state.snapshot_pacing`)
    snapshot_paced: bool = False

    def tasks(self, plan: Plan) -> Iterator[WiredTask]:
        return wire_stream(plan, self.iterations, self.start, with_init=self.with_init)


class Backend(ABC):
    """Where a run's replicas live and their loops run.

    A subclass implements every abstract method; the others have a default for a backend
    without that capability, and each says what the driver does then."""

    #: True for a backend whose replicas wait at a :class:`~workbench.runtime.replicas.fence.Fence`
    #: (it implements :meth:`release` and :meth:`fence`): the driver then paces the loops,
    #: in lockstep or a window of iterations ahead, and closes a stop at an exact boundary.
    #: A backend without one is never paced, and its loops stop after the task in hand.
    fenced: ClassVar[bool] = False
    #: the run's snapshots, while :meth:`start` was asked for some
    #: (``stream.snapshot_every``): the driver settles it as iterations are recorded, and a
    #: lost worker's run continues from it. None: no snapshots are taken.
    snapshots: SnapshotBook | None = None
    #: set (by the driver or the trainer) once a stop has already waited its grace for a
    #: cell that did not return: :meth:`teardown` then does not wait that long again
    overdue: bool = False
    #: what names this stretch's replicas on a shared cluster (the Dask backend's key for its
    #: deployed replicas and its scheduler topic, which the dashboard page reads); "" in process
    run_id: str = ""

    # -- what every backend does -------------------------------------------------------
    @abstractmethod
    def deploy(
        self,
        plan: Plan,
        programs: dict[str, GroupProgram],
        notebook: dict[str, Any],
        states: dict[tuple[str, int], dict] | None = None,
    ) -> None:
        """Create every replica of ``plan`` (``states``: (group, index) → fragment states to
        resume), with the notebook values its cells read."""

    @abstractmethod
    def start(self, plan: Plan, stream: StreamSpec, events: Events) -> None:
        """Start every replica's loop over ``stream`` (:func:`run_replica`), without waiting
        for them; each loop's reports, error and exit reach the driver through ``events``."""

    @abstractmethod
    def stop(self) -> None:
        """Ask every loop to stop after its current task (non-blocking)."""

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`~workbench.errors.WorkerLostError` if a process holding replicas is
        gone, or has stopped answering (called by the driver about once a second). A backend
        whose replicas all live in this process cannot lose one: it returns."""

    @abstractmethod
    def failure(self, exc: BaseException) -> BaseException:
        """What a loop's error means: the error itself, or a
        :class:`~workbench.errors.WorkerLostError` when it came from a process that died."""

    @abstractmethod
    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        """Every replica's fragment states, once the loops have stopped."""

    @abstractmethod
    def teardown(self) -> None:
        """Wait for the loops to end and drop the replicas' state (envs closed, memory
        freed); a cell that does not return is ended, or said to be running on."""

    # -- what some backends can do: the defaults say "not here" --------------------------
    def release(self, iteration: int) -> None:
        """The replicas may begin every iteration up to ``iteration`` (lockstep's next one,
        or the window's end). Asked only of a :attr:`fenced` backend: without a fence there
        is nothing to release."""

    def fence(self, at_least: int) -> int | None:
        """Close every replica at one exact iteration boundary ≥ ``at_least`` and return it,
        or None for no boundary: the loops then stop after the task in hand, and the driver
        waits for them to exit. A backend without a fence has no boundary; nor has an
        asynchronous policy (its replicas share no iteration)."""
        return None

    def activity(self) -> Activity | None:
        """Per replica (``"group[index]"``): steps finished, and CPU seconds of its loop
        (None where unknown), read when the run falls silent (:mod:`workbench.runtime.process.stall`).
        None: a backend that cannot see its replicas' progress."""
        return None

    def busy_cells(self) -> list[str]:
        """What each replica's cell is doing, said when a stop is overdue or the run stalls.
        A backend that cannot ask its replicas says nothing."""
        return []

    def env_step_counts(self) -> dict[str, int]:
        """Each replica's own count of the env steps its envs took in the run, read once the
        loops stopped (the steps of iterations left unfinished count: docs/counting.md).
        Empty: a backend that cannot read them, and the recorded count stands."""
        return {}

    def scheduler_lost(self) -> str | None:
        """The scheduler's address when this backend's client has lost it (its loops were
        cancelled with it), else None. A backend without a scheduler has none to lose."""
        return None

    def announce(self, kind: str, message: str, iteration: int) -> None:
        """Show what happened to the run (a lost worker's line) where its live view is.
        A backend without a dashboard page has nowhere to show it."""


def run_replica(
    replica: GroupReplica,
    plan: Plan,
    stream: StreamSpec,
    mailbox: Mailbox,
    postman,
    counts: dict[str, int],
    report: Callable[[int, TaskReport], None],
    *,
    stopping: Callable[[], bool],
    stop: Callable[[], None],
    fence: Fence | None,
    on_error: Callable[[BaseException], None] | None = None,
    on_exit: Callable[[], None] | None = None,
    passes: tuple[type[BaseException], ...] = (),
) -> int | None:
    """Run one replica's loop over ``stream``: the loop every backend runs per replica (a
    thread inline, a long-lived task on a Dask worker), with what differs passed in.

    ``report(task, TaskReport)`` carries each task's report to the driver (inline: onto its
    :class:`Events`; on Dask: over the driver's channel); snapshots go to the driver's
    mailbox through ``postman``, as every value the replica sends. ``counts``: each group's
    replica count. ``stopping()`` says the run is stopping. ``fence``: the replica's (None
    under an asynchronous policy), gated at the stream's start in lockstep.

    An error in the loop first stops the run's loops (``stop()``), then goes to
    ``on_error`` (inline: the driver's events) — or, without one, is raised (on Dask: the
    task's outcome, which reaches the driver as its future's). ``passes``: exceptions that
    end the loop without being the run's error (inline's ``ThreadReclaimed``: a stop ending
    a cell that did not return), raised as they are. ``on_exit()`` runs however the loop
    ended (inline: the loop's exit event; on Dask its task's future says it).

    Returns how many tasks ran (:func:`~workbench.runtime.replicas.loop.run_loop`), or None after an
    error handed to ``on_error``.
    """
    group, index = replica.program.group, replica.index

    def snapshot(iteration: int, full: bool) -> int:
        data = replica.snapshot_bytes(full)
        postman.send(DRIVER, snapshot_key(group, full), iteration, index, data)
        return len(data)

    try:
        if fence is not None and stream.lockstep:  # iterations wait for the driver's release
            fence.gate(stream.start)
        return run_loop(
            replica,
            stream.tasks(plan),
            mailbox,
            postman,
            counts,
            report,
            stopping,
            snapshot,
            stream.snapshot_every,
            stream.full_snapshot_every,
            fence,
            stream.snapshot_paced,
            stream.clip_every,
        )
    except passes:
        raise
    except BaseException as exc:
        stop()  # the replicas that can be told at once stop now; the driver stops the rest
        if on_error is None:
            raise
        on_error(exc)  # the driver re-raises it
        return None
    finally:
        if on_exit is not None:
            on_exit()
