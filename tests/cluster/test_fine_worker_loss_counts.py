"""A worker killed mid-run under ``fine`` (the actor beside the learner): the learner is
restored from a snapshot that holds every update of the iterations the run does not run
again. Under fine the learner's iteration cell opens the task of the next iteration's
steps; a snapshot taken as that task began held the learner one update behind the
iteration the run continued from, so one update was lost (counts 1 … 13, 14, 14, 15 … 29).

What is asserted is the mechanism: the learner's own counter, logged each iteration, is
exactly 1 … N after the loss, with no repeat and no gap."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import workbench as wb
from workbench.cluster._dask_compat import workers_info

ITERATIONS = 20
KILL_AT = 8


def counting_fdg(sleep_s: float = 0.05) -> wb.FDG:
    """README's CartPole shape: an env, a fixed actor, a learner that counts its updates
    (and sleeps ``sleep_s``, so faults land mid-run)."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment(
        "env", "envs = wb.envs.make('CartPole-v1', num_envs=4, seed=replica.index)\nobs = envs.reset()", rate="init"
    )
    fdg.add_fragment("actor", "action = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)", rate="step")
    fdg.add_fragment("env", "obs, reward, terminated, truncated, info = envs.step(action)", rate="step")
    fdg.add_fragment("learner", "count = 0", rate="init")
    fdg.add_fragment(
        "learner",
        f"import time\ncount += 1\ntime.sleep({sleep_s})\n"
        "wb.log('rollout/reward', float(reward.sum()))\nwb.log('count', count)",
        rate="iteration",
    )
    return fdg


class KillAt:
    """A run logger that SIGKILLs one worker process once iteration ``at`` is recorded:
    the one holding the learner, or (``learner=False``) one holding no learner."""

    def __init__(self, client, fdg, learner: bool, at: int) -> None:
        self.client, self.fdg, self.learner, self.at = client, fdg, learner, at
        self.pids = client.run(os.getpid)
        self.killed: str | None = None

    def log(self, row: dict) -> None:
        if row["iteration"] != self.at or self.killed is not None:
            return
        policy = self.fdg.last_run.policy
        home = set(policy.group_of("learner").workers)
        names = [w for g in policy.groups for w in g.workers]
        name = next(w for w in names if (w in home) == self.learner)
        address = next(a for a, info in workers_info(self.client).items() if str(info["name"]) == name)
        os.kill(self.pids[address], signal.SIGKILL)
        self.killed = name

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "policy, learner",
    [("fine", True), ("fine", False), ("coarse", True)],
    ids=["fine, learner's worker", "fine, env-only worker", "coarse, learner's worker"],
)
def test_the_learner_counts_every_iteration_once_after_a_worker_loss(policy, learner, doomed_cluster):
    fdg = counting_fdg()
    killer = KillAt(doomed_cluster, fdg, learner, KILL_AT)
    run = fdg.run(
        iterations=ITERATIONS, steps=16, policy=policy, cluster=doomed_cluster, progress=False, loggers=[killer]
    )

    assert killer.killed is not None
    assert run.status == "finished" and run.completed_iterations == ITERATIONS, run.summary()
    lost = [e for e in run.events if e.kind == "worker lost"]
    assert len(lost) == 1, run.events
    assert [row["iteration"] for row in run.rows] == list(range(ITERATIONS))
    counts = [row.get("count") for row in run.rows]
    assert counts == list(range(1, ITERATIONS + 1)), (counts, lost[0].message)
    assert run.state.fragments["learner"][0]["count"] == ITERATIONS
