"""A process that dies in iteration i is said to have died in iteration i (issue 30: a cell
that killed its process in iteration 1 was reported "died again at iteration 0", the run's
count of finished iterations, while its replicas had run ahead of it). Whichever of the
process's fragments kills it — the env, stepping the next iteration while the learner
finishes the last, or the learner, while the actor waits for its weights — the
ProcessDiedError names the iteration the killing cell was in (workbench.runtime.engine.in_flight)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import workbench as wb
from workbench.errors import ProcessDiedError

AT = 2
STEPS = 3
KILL = "if {who}replica.iteration == AT:\n    os.kill(os.getpid(), 9)\n"


@pytest.fixture()
def doomed_client():
    """Its own 2-worker cluster per test: a test kills both worker processes (their nannies
    start new ones, which join later)."""
    from distributed import Client

    from workbench.cluster.restart_tolerant import PatientLocalCluster

    with PatientLocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.CRITICAL,
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


def _fdg(killer: str, weights: bool) -> wb.FDG:
    """Env replicas stepping for a learner; ``killer`` (the env's step on replica 0, or the
    learner's update) ends its process in iteration AT. With ``weights`` the actor reads
    the learner's newest weights, so it waits for each update; without, the env replicas
    run ahead of the learner (the case that was said one iteration early)."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "os": os, "AT": AT})
    fdg.add_fragment("env", "obs = np.zeros((2, 3))", rate="init")
    fdg.add_fragment("learner", "w = 0.0", rate="init")
    fdg.add_fragment("actor", "action = obs.sum(axis=1)" + (" + w" if weights else ""), rate="step")
    env_kill = KILL.format(who="replica.index == 0 and ") if killer == "env" else ""
    fdg.add_fragment("env", env_kill + "obs = obs + 1\nreward = action * 0.0", rate="step")
    learner_kill = KILL.format(who="") if killer == "learner" else ""
    fdg.add_fragment("learner", learner_kill + "w = float(reward.sum()) * 0.0", rate="iteration")
    return fdg


@pytest.mark.parametrize(
    ("killer", "weights"),
    [("env", False), ("learner", True)],
    ids=["the env, running ahead of the learner", "the learner, while the actor waits for it"],
)
def test_a_process_that_dies_in_iteration_i_is_said_to_die_in_iteration_i(doomed_client, killer, weights):
    with pytest.raises(ProcessDiedError, match=rf"died again at iteration {AT} \(worker "):
        _fdg(killer, weights).run(
            iterations=AT + 3, steps=STEPS, policy="coarse", cluster=doomed_client, progress=False
        )


def test_the_kill_is_where_the_test_says(client):
    """The same cells raising instead of dying: the cell's error says iteration AT."""
    fdg = _fdg("env", weights=False)
    fdg.namespace["os"] = type("Raise", (), {"getpid": staticmethod(os.getpid), "kill": staticmethod(lambda *_: 1 / 0)})
    with pytest.raises(wb.FragmentRuntimeError, match=rf"replica 0 .*raised in iteration {AT} "):
        fdg.run(iterations=AT + 1, steps=STEPS, policy="coarse", cluster=client, progress=False)
