"""Counting and stopping under every policy (issue 29 item 5).

- An asynchronous stop counts every step the envs took: the actors run ahead of the
  learner, and the iterations the stop leaves unfinished held steps that no row does.
- A ``target_return`` stops the run at the iteration that met it, also in an FDG whose
  actors read nothing from the learner (they used to run many iterations past it).
- A stuck cell and a stop count the steps the envs took (a stuck learner at iteration 0
  left a coarse run saying "0 env steps" while its envs had stepped every iteration).

Every count is compared with the env replicas' own counts (their counters in the run's
state, or what the env cell itself counted), never with a wall-clock or learning outcome.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
import workbench.cluster.backend
import workbench.runtime.engine.driver
from workbench.runtime.state.counting import counter_of

ENVS = 4  # all env replicas together


def own_counts(run) -> dict[int, int]:
    """The env replicas' own counters, from the run's final state: replica → steps."""
    return {i: counter_of(values) for i, values in enumerate(run.state.fragments["env"])}


class StopAt:
    """A run logger that stops the run when iteration ``at`` is recorded."""

    def __init__(self, fdg: wb.FDG, at: int) -> None:
        self.fdg, self.at = fdg, at

    def log(self, row: dict) -> None:
        if row["iteration"] >= self.at:
            self.fdg.stop()

    def close(self) -> None:
        pass


def async_fdg() -> wb.FDG:
    """Actors that never wait for the learner, and a learner slower than them."""
    fdg = wb.FDG(namespace={"np": np, "time": time, "ENVS": ENVS})
    fdg.add_fragment("env", "obs = np.zeros(ENVS // replica.count)", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = obs + action\nreward = np.ones_like(obs)", rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "time.sleep(0.05)\ntotal += float(reward.sum())", rate="iteration")
    return fdg


def test_an_async_stop_counts_every_step_the_envs_took_and_a_resume_goes_on_from_it(client):
    fdg = async_fdg()
    run = fdg.run(iterations=400, steps=5, policy="async", cluster=client, progress=False, loggers=[StopAt(fdg, 3)])
    assert run.status == "stopped"
    own = own_counts(run)
    assert run.env_steps == sum(own.values())
    assert sorted(run.replica_env_steps.values()) == sorted(own.values())
    # the actors were ahead of the learner: those iterations are counted, in no row
    assert run.unfinished_env_steps > 0
    assert run.env_steps == run.rows[-1]["env_steps"] + run.unfinished_env_steps
    resumed = fdg.run(iterations=2, steps=5, policy="async", cluster=client, progress=False, resume=run.state)
    assert resumed.env_steps_base == run.env_steps  # the count goes on, with no jump


# -- a target stops at the iteration that met it -------------------------------------------
SOLVED_FROM = 6  # every episode from this iteration on returns 1: solved exactly there


def target_fdg(coupled: bool) -> wb.FDG:
    """Each env steps its envs and ends one episode per env per step, returning 0 before
    iteration ``SOLVED_FROM`` and 1 from it. Coupled: the actor reads the learner's value of
    the iteration before; decoupled: nothing the learner writes reaches the env's side."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "ENVS": ENVS, "SOLVED_FROM": SOLVED_FROM})
    fdg.add_fragment("env", "obs = np.zeros(ENVS // replica.count)", rate="init")
    if coupled:
        fdg.add_fragment("learner", "k = 0", rate="init")
        fdg.add_fragment("actor", "action = obs + k", rate="step")
    fdg.add_fragment(
        "env",
        ("obs = obs + action\n" if coupled else "obs = obs + 1\n")
        + "reward = np.ones_like(obs)\nwb.log('charts/episodic_return', "
        "np.full(obs.shape[0], float(replica.iteration >= SOLVED_FROM)))",
        rate="step",
    )
    fdg.add_fragment("learner", "seen = reward.shape" + ("\nk += 1" if coupled else ""), rate="iteration")
    return fdg


@pytest.mark.parametrize(
    "policy, coupled", [("inline", False), ("inline", True), ("coarse", False), ("coarse", True), ("fine", True)]
)
def test_a_target_stops_the_run_at_the_iteration_that_met_it(policy, coupled, client):
    steps = 5
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = target_fdg(coupled).run(
        iterations=200, steps=steps, policy=policy, target_return=0.5, progress=False, **kwargs
    )
    assert run.status == "solved" and run.solved_at["iteration"] == SOLVED_FROM
    assert run.rows[-1]["iteration"] == SOLVED_FROM and run.completed_iterations == SOLVED_FROM + 1
    # no replica stepped past it: the envs' own counts are those iterations' steps
    own = own_counts(run)
    assert sum(own.values()) == run.env_steps == (SOLVED_FROM + 1) * steps * ENVS
    assert run.unfinished_env_steps == 0


# -- a stuck cell and a stop ---------------------------------------------------------------
STUCK_LEARNER = """\
open(marker, "a").close()
while not os.path.exists(release):       # does not return (until the test ends)
    time.sleep(0.05)
total += float(reward.sum())
"""
#: the env counts its own steps, in a file per replica (its process may be a worker's)
COUNTING_ENV = """\
obs = obs + 1
reward = obs.copy()
mine += reward.shape[0]
open(os.path.join(counts, str(replica.index)), "w").write(str(mine))
"""


@pytest.fixture
def stuck_paths(tmp_path, monkeypatch):
    """(release, marker, counts dir); the stop's grace shortened; released at the end."""
    monkeypatch.setattr(workbench.runtime.engine.driver, "STOP_GRACE_S", 2.0)
    monkeypatch.setattr(workbench.cluster.backend, "STOP_GRACE_S", 2.0)
    release, marker, counts = tmp_path / "release", tmp_path / "stuck", tmp_path / "counts"
    counts.mkdir()
    yield str(release), str(marker), counts
    release.write_text("")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(t.name.startswith("workbench-") for t in threading.enumerate()):
        time.sleep(0.1)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_stuck_cell_and_a_stop_count_the_steps_the_envs_took(policy, client, stuck_paths):
    release, marker, counts = stuck_paths
    fdg = wb.FDG(
        namespace={"np": np, "os": os, "time": time, "release": release, "marker": marker, "counts": str(counts)}
    )
    fdg.add_fragment("env", "obs = np.zeros(2)\nmine = 0", rate="init")
    fdg.add_fragment("env", COUNTING_ENV, rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", STUCK_LEARNER, rate="iteration")
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "run",
            fdg.run(
                iterations=3,
                steps=3,
                policy=policy,
                progress=False,
                **({"cluster": client} if policy != "inline" else {}),
            ),
        )
    )
    thread.start()
    deadline = time.monotonic() + 120  # a hang guard
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    fdg.stop()
    thread.join(timeout=120)
    run = result["run"]
    assert run.status == "stopped" and run.completed_iterations == 0  # the learner finished none
    own = {f"{p.name}": int(p.read_text()) for p in Path(counts).iterdir()}
    assert own and run.env_steps == sum(own.values()) == run.unfinished_env_steps
    assert sorted(run.replica_env_steps.values()) == sorted(own.values())
    assert (
        f"{run.env_steps:,} env steps ({run.env_steps:,} of them in iterations the stop left unfinished)"
        in run.summary()
    )
