"""Under SingleLearnerFine with as many env replicas as workers, the env replicas step at
the same time, in processes of their own.

The preset used to spread env replicas over the workers other than the learner's only, so
``SingleLearnerFine(envs=W)`` on W workers put two on one worker. Replicas of one process
take turns (one cell at a time: each keeps its own random streams), so those two stepped
one after the other, and every step of the run lasted two env steps: 52 % of W × the
1-worker rate at every W from 2 to 32. Here each env step waits (a simulator answering);
whether two replicas' waits overlap is a matter of order, not of speed: under turns they
never can.
"""

from __future__ import annotations

import os
import time

import numpy as np

import workbench as wb

PAUSE_S = 0.05  # each env step's wait: long beside a channel hop, short for the test
STEPS = 4


def stepping_fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "time": time, "os": os, "PAUSE_S": PAUSE_S})
    fdg.add_fragment("env", "obs = np.zeros((1, 1))\nspans = []", rate="init")
    fdg.add_fragment("actor", "action = obs[:, 0] * 0", rate="step")
    fdg.add_fragment(
        "env",
        (
            "start = time.monotonic()\n"  # one clock for every process of the host
            "time.sleep(PAUSE_S)  # a remote simulator answering\n"
            "spans.append((start, time.monotonic(), os.getpid()))\n"
            "obs = np.zeros((1, 1))\n"
            "reward = np.ones(1)\n"
        ),
        rate="step",
    )
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    return fdg


def test_fine_env_replicas_step_at_once_in_their_own_processes(client):
    workers = len(client.scheduler_info()["workers"])
    run = stepping_fdg().run(
        iterations=2,
        steps=STEPS,
        policy=wb.SingleLearnerFine(envs=workers),
        cluster=client,
        progress=False,
        keep_state=True,
    )
    env_group = next(g for g in run.policy.groups if "env" in g.fragments)
    assert len(set(env_group.workers)) == workers  # one env replica per worker
    spans = [replica["spans"] for replica in run.state.fragments["env"]]
    assert len({s[0][2] for s in spans}) == workers  # each in a process of its own
    # step by step, every replica's wait overlaps every other's at least once in the run
    # (in practice at nearly every step: they receive their actions microseconds apart)
    steps = range(len(spans[0]))
    for a in range(workers):
        for b in range(a + 1, workers):
            overlapping = [t for t in steps if spans[a][t][0] < spans[b][t][1] and spans[b][t][0] < spans[a][t][1]]
            assert overlapping, f"env replicas {a} and {b} never stepped at the same time"
