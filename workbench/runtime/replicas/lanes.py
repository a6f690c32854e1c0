"""Replicas of one acting group in one process, stepped as lanes of one thread.

Two actor+env replicas on one worker take turns with the process's random generators
(`workbench.runtime.state.randomness`), one cell at a time. While one replica's envs step in
C++ threads (EnvPool), the other could act, but handing the turn between two OS threads
costs more than an act (docs/envpool.md). With ``lanes=True`` the run steps every such
group's co-located replicas in **one** thread instead, each replica's step loop a
greenlet: an env that has handed its actions to its own threads calls
:func:`step_elsewhere`, and the next lane runs its cells until its env does the same.
Nothing else changes: each replica keeps its namespace, its random streams (swapped at
every switch, as at every turn) and its counts, so a run gives the same numbers with and
without lanes; only the time differs.

How the lanes meet: each replica, on entering an iteration's steps, waits until every
co-located replica of its group still running has arrived (:meth:`Lanes.run`); the last
to arrive drives all of them in its thread, round-robin at each switch, and the others
wait for their own lane to finish. A replica whose loop ends (done, stopped, failed)
leaves (:meth:`Lanes.leave`), so nobody waits for it. Without EnvPool (or another env
that calls :func:`step_elsewhere`) the lanes run one after another: no overlap, no harm.

A lane must not wait inside a step cell for another lane of its thread: a step cell that
calls ``wb.allreduce`` or ``wb.env_steps`` gets a `LanesError` saying so.

Example (two lanes, a switch in each step: their steps interleave in one thread)::

    >>> import threading
    >>> lanes, order = Lanes([0, 1]), []
    >>> def body(k):
    ...     for t in range(2):
    ...         order.append((k, t))
    ...         step_elsewhere()
    >>> threads = [threading.Thread(target=lanes.run, args=(k, lambda k=k: body(k), lambda: False))
    ...            for k in (0, 1)]
    >>> for th in threads: th.start()
    >>> for th in threads: th.join()
    >>> order
    [(0, 0), (1, 0), (0, 1), (1, 1)]
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from workbench.config import LANES_INSTALL_HINT, lanes_available  # re-exported: their home is beside the --lanes check
from workbench.context import lane_switch, step_elsewhere
from workbench.errors import WorkbenchError
from workbench.runtime.transport.channels import Stopped

__all__ = [
    "Lanes",
    "LanesError",
    "step_elsewhere",
    "join_lanes",
    "run_as_lane",
    "lanes_available",
    "placed_for_lanes",
    "NOT_PLACED_FOR_LANES",
    "LANES_INSTALL_HINT",
]

#: how often a replica waiting for its lane looks at the run's stop flag (seconds)
_STOP_POLL_S = 0.05


class LanesError(WorkbenchError):
    """A step cell did what lanes cannot do (wait for another lane of its thread)."""


class _Lane:
    __slots__ = ("index", "body", "context", "switched", "claimed", "done", "error", "greenlet")

    def __init__(
        self, index: int, body: Callable[[], Any], context: contextvars.Context, switched: Callable[[bool], None] | None
    ) -> None:
        self.index, self.body, self.context, self.switched = index, body, context, switched
        self.claimed = self.done = False
        self.error: BaseException | None = None
        self.greenlet = None


class Lanes:
    """The lanes of one group's co-located replicas (one per run, group and process)."""

    def __init__(self, members: Iterable[int]) -> None:
        self._cond = threading.Condition()
        self._members = set(members)  # replicas whose loops still run
        self._arrived: dict[int, _Lane] = {}

    def join(self, index: int) -> None:
        """Replica ``index`` steps with the others from its next iteration (one re-placed
        onto this process mid-run)."""
        with self._cond:
            self._members.add(index)

    def leave(self, index: int) -> None:
        """Replica ``index``'s loop has ended: the others no longer wait for it."""
        with self._cond:
            self._members.discard(index)
            self._cond.notify_all()

    def run(
        self,
        index: int,
        body: Callable[[], Any],
        stopped: Callable[[], bool],
        switched: Callable[[bool], None] | None = None,
    ) -> None:
        """Run ``body`` (replica ``index``'s step loop of one iteration) as a lane; raise
        what it raised. ``switched(away)`` is called as the lane leaves (True) and gets its
        turn back (False): the replica gives up and takes back its random streams there."""
        lane = _Lane(index, body, contextvars.copy_context(), switched)
        with self._cond:
            self._arrived[index] = lane
            self._cond.notify_all()
            while not lane.claimed:
                if set(self._arrived) >= self._members:  # all here: this thread drives them
                    batch = sorted(self._arrived.values(), key=lambda a: a.index)
                    self._arrived.clear()
                    for member in batch:
                        member.claimed = True
                    break
                if stopped():  # nobody drives it yet: leave the meeting and say so
                    del self._arrived[index]
                    raise Stopped()
                self._cond.wait(_STOP_POLL_S)
            else:
                batch = None
        if batch is not None:
            self._drive(batch)
        with self._cond:
            while not lane.done:
                self._cond.wait()
        if lane.error is not None:
            raise lane.error

    def _drive(self, batch: list[_Lane]) -> None:
        """Run the lanes of ``batch`` round-robin in this thread until all have finished."""
        import greenlet

        driver = greenlet.getcurrent()
        alive = list(batch)

        def make_switch(lane: _Lane) -> Callable[[], None]:
            switched = lane.switched

            def switch() -> None:
                if len(alive) < 2:  # the last lane left: nobody to run meanwhile
                    return
                if switched is not None:
                    switched(True)
                try:
                    driver.switch()
                finally:
                    if switched is not None:
                        switched(False)

            return switch

        def start(lane: _Lane) -> None:
            lane_switch.set(make_switch(lane))
            try:
                lane.body()
            except BaseException as exc:  # the replica's own thread re-raises it
                lane.error = exc

        for lane in batch:
            lane.greenlet = greenlet.greenlet(lambda lane=lane: start(lane), parent=driver)
            lane.greenlet.gr_context = lane.context.copy()  # the replica's own context: its wb.* calls
        try:
            while alive:
                for lane in list(alive):
                    lane.greenlet.switch()
                    if lane.greenlet.dead:  # its replica's thread goes on with its iteration now
                        alive.remove(lane)
                        self._finished(lane)
        finally:
            for lane in alive:  # only if the driving itself failed (it should not)
                lane.error = lane.error or RuntimeError("its lane was abandoned")
                self._finished(lane)

    def _finished(self, lane: _Lane) -> None:
        with self._cond:
            lane.done = True
            self._cond.notify_all()


def cannot_wait_in_a_lane(what: str) -> Callable[..., Any]:
    """What ``wb.allreduce`` / ``wb.env_steps`` do inside a step cell that runs as a lane."""

    def refuse(*args, **kwargs):
        raise LanesError(
            f"{what} waits for other replicas, and inside a step cell run as a lane (lanes=True) "
            "the replicas it waits for run in the same thread: it would wait forever. Call it "
            "outside the step cells (an iteration cell), or run without lanes (lanes=False)."
        )

    return refuse


def join_lanes(registry: dict, key: Any, replica, siblings: list[int]) -> None:
    """Give ``replica`` the lanes of its group in this process (``registry[key]``, made on
    first use), where the run asked for lanes, its group steps on its own (step cells that
    receive nothing from other groups each step: a fused actor+env, not SingleLearnerFine's
    actor or env, whose lanes could wait on each other through the other group) and
    ``siblings`` (the group's replicas in this process) are two or more."""
    program = replica.program
    if program.lanes and program.steps_on_its_own and len(siblings) > 1:
        lanes = registry.get(key) or registry.setdefault(key, Lanes(siblings))  # one per group here
        lanes.join(replica.index)  # one re-placed here mid-run joins the ones already here
        replica.lanes = lanes


def placed_for_lanes(plan, programs: dict) -> bool:
    """Whether some group of ``plan`` that steps on its own has two or more replicas in one
    process (what lanes need), by the placement alone.

    >>> from workbench.fdg.policy import Group
    >>> from types import SimpleNamespace as NS
    >>> plan = NS(groups={"actor": Group(("actor",), 2, ("w0", "w1"))})
    >>> placed_for_lanes(plan, {"actor": NS(steps_on_its_own=True)})
    False
    >>> plan.groups["actor"] = Group(("actor",), 2, ("w0", "w0"))
    >>> placed_for_lanes(plan, {"actor": NS(steps_on_its_own=True)})
    True
    """
    return any(
        programs[name].steps_on_its_own and len(set(group.workers)) < len(group.workers)
        for name, group in plan.groups.items()
    )


NOT_PLACED_FOR_LANES = (
    "lanes=True has nothing to step as lanes: no group that steps on its own (a fused actor+env) "
    "has two replicas in one process, so every replica keeps its own thread. Put two on a worker "
    "(wb.SingleLearnerCoarse(actors=2 * workers)) or two in this process (a wb.Policy whose acting "
    "Group has workers (IN_PROCESS, IN_PROCESS)); docs/envpool.md"
)


def run_as_lane(replica, loop: Callable[[], None], ctx) -> None:
    """Run ``loop`` (replica's step loop of one iteration) as its lane of ``replica.lanes``.

    At each switch the replica gives its turn up (the next lane takes it, with its own
    random streams) and takes it back on its return; the time it spent away is added to
    ``replica.lane_away`` (its cells' clocks leave it out). ``wb.allreduce`` and a
    ``wb.env_steps`` that would wait for another replica refuse inside the lane's cells."""
    held, left = False, 0.0
    turns, streams, stopped = replica.turns, replica.streams, replica._stopped

    def switched(away: bool) -> None:
        nonlocal held, left
        replica.lane_waiting = away  # a stop that finds its cell busy says where it is
        if away:
            held, left = streams.holding, time.perf_counter()
            turns.give(streams)
            return
        replica.lane_away += time.perf_counter() - left
        if held and not turns.take(streams, stopped):
            replica._ran_without_turn(*replica.running_cell)

    reducer, env_steps = ctx.reducer, ctx.env_steps
    refuse_count = cannot_wait_in_a_lane("wb.env_steps() before every env replica's first step")

    def counted() -> int:  # known already (no wait) after the first steps: allowed
        return env_steps() if {"base", "batch"} <= set(replica._totals) else refuse_count()

    ctx.reducer, ctx.env_steps = cannot_wait_in_a_lane("wb.allreduce"), counted
    try:
        replica.lanes.run(replica.index, loop, stopped, switched)
    finally:
        ctx.reducer, ctx.env_steps = reducer, env_steps
