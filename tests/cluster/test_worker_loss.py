"""A worker process killed mid-run: the run notices, re-places, restores the learner from
its snapshot, and goes on. What is asserted is the mechanism (the learner's own counter of
updates carries through the loss), not a learning outcome that float details can flip."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from workbench.cluster._dask_compat import workers_info
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.policy import Group, Policy
from workbench.fdg.rehome import rehome
from workbench.notebook import load_notebook

QUICKSTART = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
KILL_AT = 12
ITERATIONS = 50


class KillAt:
    """A run logger that SIGKILLs the worker process holding ``fragment`` once iteration
    ``at`` has finished."""

    def __init__(self, client, fdg, fragment: str, at: int) -> None:
        self.client, self.fdg, self.fragment, self.at = client, fdg, fragment, at
        self.pids = client.run(os.getpid)
        self.killed: tuple[str, float, float | None] | None = None

    def log(self, row: dict) -> None:
        if row["iteration"] != self.at or self.killed is not None:
            return
        run = self.fdg.last_run
        group = run.policy.group_of(self.fragment)
        name = group.workers[-1]
        address = next(a for a, info in workers_info(self.client).items() if str(info["name"]) == name)
        os.kill(self.pids[address], signal.SIGKILL)
        self.killed = (name, time.time(), run.mean_return())

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fragment", ["learner", "env"], ids=["learner's worker", "an actor-only worker"])
def test_a_killed_worker_costs_at_most_the_iteration_in_flight_and_training_goes_on(fragment, doomed_cluster):
    fdg, options = load_notebook(QUICKSTART)
    killer = KillAt(doomed_cluster, fdg, fragment, KILL_AT)
    if fragment == "env":  # the worker with an actor+env replica but no learner
        killer.log = _kill_the_worker_without_the_learner(killer)
    run = fdg.run(
        iterations=ITERATIONS,
        steps=options["steps"],
        policy="coarse",
        cluster=doomed_cluster,
        progress=False,
        loggers=[killer],
    )

    assert killer.killed is not None
    name, killed_at, return_then = killer.killed
    assert run.status == "finished" and run.completed_iterations == ITERATIONS, run.summary()
    assert [row["iteration"] for row in run.rows] == list(range(ITERATIONS))
    lost = [e for e in run.events if e.kind == "worker lost"]
    assert len(lost) == 1 and f"worker {name} left" in lost[0].message
    assert lost[0].time - killed_at < 10, "noticed within seconds"
    assert lost[0].iteration >= KILL_AT, "at most the in-flight iteration is run again"
    assert run.lost_iterations <= 1
    # the learner was restored from its snapshot, not started afresh: its own counter of
    # updates (one per iteration, kept in its state) counted every iteration of the run
    learner = run.state.fragments["learner"][0]
    assert learner["update"] == ITERATIONS, (learner["update"], run.summary())
    assert return_then is None or run.mean_return() is not None  # episodes kept finishing


def _kill_the_worker_without_the_learner(killer: KillAt):
    def log(row: dict) -> None:
        if row["iteration"] != killer.at or killer.killed is not None:
            return
        run = killer.fdg.last_run
        learner_home = set(run.policy.group_of("learner").workers)
        actors = run.policy.group_of("env").workers
        name = next(w for w in actors if w not in learner_home)
        address = next(a for a, info in workers_info(killer.client).items() if str(info["name"]) == name)
        os.kill(killer.pids[address], signal.SIGKILL)
        killer.killed = (name, time.time(), run.mean_return())

    return log


def test_rehome_moves_only_the_replicas_of_workers_that_are_gone():
    policy = Policy(
        "custom",
        (Group(("actor", "env"), 2, ("a", "b")), Group(("learner",), 1, ("b",)), Group(("critic",), 1, ("c",), "gpu")),
    )
    left = Inventory((WorkerInfo("tcp://1:1", "a"), WorkerInfo("tcp://3:3", "c", gpus=1), WorkerInfo("tcp://4:4", "d")))
    moved = rehome(policy, left)
    assert moved.groups[0].workers == ("a", "d")  # "b" → the least loaded worker left
    assert moved.groups[1].workers == ("a",)  # then a tie (one replica each): the first one
    assert moved.groups[2] == policy.groups[2]  # untouched: its worker is still there


def test_rehome_refuses_a_gpu_group_when_no_gpu_is_left():
    from workbench.errors import PlacementError

    policy = Policy("custom", (Group(("learner",), 1, ("g",), "gpu"),))
    with pytest.raises(PlacementError, match="no worker with a GPU is left"):
        rehome(policy, Inventory((WorkerInfo("tcp://1:1", "a"),)))
