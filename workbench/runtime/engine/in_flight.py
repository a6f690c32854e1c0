"""Which iteration a replica was in when its process died, as the driver can tell.

A dead process says nothing more, so the driver works it out from what it has: the task
stream every replica walks (:mod:`workbench.fdg.wiring`) and the reports they sent. A
replica reports each task once it is done and only then begins its next one, so its
**next task** is the one after the last it reported; it **had begun** that task when
every input the task waits for had been reported by its producers (an actor whose next
rollout waits for the learner's new weights had not begun it: the learner was still
computing). The iteration a lost process was in is the newest iteration one of its
replicas had begun — the run's count of finished iterations is not it: replicas run
ahead of the iterations recorded (an env replica already stepping iteration ``i + 1``
while the learner finishes ``i``), and a cell that kills its process in iteration 1 was
said to have died "at iteration 0".

Example — a learner whose new weights the actor waits for, both on worker ``w0``:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.plan import make_plan
    >>> from workbench.fdg.policy import Group, Policy
    >>> from workbench.fdg.wiring import wire
    >>> fdg = Graph()
    >>> for name, code, rate in [("env", "obs = 0", "init"), ("learner", "w = 0", "init"),
    ...                          ("actor", "act = obs + w", "step"), ("env", "obs = act", "step"),
    ...                          ("learner", "w = obs.sum()", "iteration")]:
    ...     _ = fdg.add_fragment(name, code, rate=rate)
    >>> plan = make_plan(fdg, Policy("p", (Group(("actor", "env"), 1, ("w0",)), Group(("learner",), 1, ("w0",)))))
    >>> where = InFlight(plan)
    >>> for task in wire(plan, iterations=3):  # 0, 1: init; 2, 3: iteration 0; 4, 5: iteration 1
    ...     where.walked(task)
    >>> for task, group in [(0, "actor+env"), (1, "learner"), (2, "actor+env")]:
    ...     where.reported(task, group, 0)
    >>> where.iteration_on({"w0"}, unreported={3, 4, 5})  # the learner computes iteration 0; the actor waits
    0
    >>> where.reported(3, "learner", 0)
    >>> where.iteration_on({"w0"}, unreported={4, 5})  # the actor steps iteration 1; the learner waits
    1
"""

from __future__ import annotations

from collections.abc import Collection

from workbench.fdg.plan import Plan
from workbench.fdg.wiring import WiredTask

__all__ = ["InFlight"]


class InFlight:
    """Each replica's place in the task stream, from the tasks the driver walked
    (:meth:`walked`, in stream order) and the reports it received (:meth:`reported`)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._tasks: dict[str, list[WiredTask]] = {}  # group → its walked tasks not yet reported by every replica
        self._last: dict[tuple[str, int], int] = {}  # (group, replica) → newest task index it reported
        self.last_walked = -1
        #: the newest iteration any replica reported a task of
        self.newest_reported: int | None = None

    def walked(self, task: WiredTask) -> None:
        self._tasks.setdefault(task.spec.group, []).append(task)
        self.last_walked = max(self.last_walked, task.index)

    def reported(self, task: int, group: str, replica: int, iterations: Collection[int] = ()) -> None:
        key = (group, replica)
        self._last[key] = max(self._last.get(key, -1), task)
        if iterations:
            self.newest_reported = max(
                max(iterations), self.newest_reported if self.newest_reported is not None else -1
            )
        # forget the group's tasks every replica has reported: the list stays a few tasks long
        done = min(self._last.get((group, r), -1) for r in range(self.plan.groups[group].replicas))
        kept = self._tasks.get(group, [])
        while kept and kept[0].index <= done:
            kept.pop(0)

    def iteration_on(self, workers: Collection[str], unreported: Collection[int]) -> int | None:
        """The newest iteration a replica placed on ``workers`` had begun (``unreported``:
        the walked tasks some replica has not reported yet). When none of them had begun a
        task (each waited for an input), the newest iteration one of them would have begun
        next; None when none had a task with an iteration to begin (deploying, init)."""
        begun, next_up = [], []
        for group in self.plan.groups.values():
            for index, worker in enumerate(group.workers):
                if worker not in workers:
                    continue
                task = self._next_task(group.name, index)
                if task is None or task.iteration is None:
                    continue
                next_up.append(task.iteration)
                if all(self._done(i.producer_task, unreported) for i in task.inputs if not i.arrival):
                    begun.append(task.iteration)
        if begun:
            return max(begun)
        return max(next_up) if next_up else None

    def _next_task(self, group: str, replica: int) -> WiredTask | None:
        last = self._last.get((group, replica), -1)
        return next((t for t in self._tasks.get(group, ()) if t.index > last), None)

    def _done(self, task: int, unreported: Collection[int]) -> bool:
        """Whether every replica of ``task`` reported it (it is walked, and not pending)."""
        return task <= self.last_walked and task not in unreported
