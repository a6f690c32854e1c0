"""A worker that is alive but does not answer (SIGSTOP: a frozen process, the cheap stand-in
for a link down) is found from the run's silence within seconds, not Dask's minutes-long
TTL; it is retired from the scheduler, and the run re-places and finishes from the newest
snapshot, as for a killed process. tests/hosts/ does the same across network namespaces."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from tests.conftest import toy_fdg
from workbench.cluster._dask_compat import workers_info

STOP_AT = 4
ITERATIONS = 12
#: silence before probing + the probe's timeout + the confirming probe's + a busy CI box's slack
DETECTED_WITHIN = 3.0 + 5.0 + 10.0 + 7.0


@pytest.fixture()
def freezable_cluster():
    """Its own 2-worker cluster; any worker process a test freezes is thawed at the end,
    pass or fail, so the cluster can close."""
    from distributed import Client

    from workbench.cluster.restart_tolerant import PatientLocalCluster

    frozen: list[int] = []
    with PatientLocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.CRITICAL,
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            try:
                yield c, frozen
            finally:
                for pid in frozen:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass


class FreezeAt:
    """A run logger that SIGSTOPs the worker process holding the learner once iteration
    ``at`` has finished."""

    def __init__(self, client, fdg, at: int, frozen: list[int]) -> None:
        self.client, self.fdg, self.at, self.frozen = client, fdg, at, frozen
        self.pids = client.run(os.getpid)
        self.stopped: tuple[str, str, float] | None = None

    def log(self, row: dict) -> None:
        if row["iteration"] != self.at or self.stopped is not None:
            return
        run = self.fdg.last_run
        name = run.policy.group_of("learner").workers[0]
        address = next(a for a, info in workers_info(self.client).items() if str(info["name"]) == name)
        self.frozen.append(self.pids[address])
        os.kill(self.pids[address], signal.SIGSTOP)
        self.stopped = (name, address, time.time())

    def close(self) -> None:
        pass


def test_a_frozen_worker_is_retired_and_the_run_goes_on_from_the_newest_snapshot(freezable_cluster):
    client, frozen = freezable_cluster
    fdg = toy_fdg(time=time)
    # the counters' env step, taking some time (iterations of some length)
    fdg.add_fragment(
        "env",
        "time.sleep(0.01)\nobs = obs + 1\nreward = action.copy()\nseen += 1\n"
        "wb.log('charts/episodic_return', float(reward.sum()))",
        rate="step",
    )
    freezer = FreezeAt(client, fdg, STOP_AT, frozen)
    run = fdg.run(iterations=ITERATIONS, steps=4, policy="coarse", cluster=client, progress=False, loggers=[freezer])

    assert freezer.stopped is not None
    name, address, stopped_at = freezer.stopped
    assert run.status == "finished" and run.completed_iterations == ITERATIONS, run.summary()
    assert [row["iteration"] for row in run.rows] == list(range(ITERATIONS))
    lost = [e for e in run.events if e.kind == "worker lost"]
    assert len(lost) == 1 and f"worker {name} stopped answering" in lost[0].message, run.events
    assert lost[0].time - stopped_at < DETECTED_WITHIN, "found from the silence, not Dask's TTL"
    assert run.lost_iterations <= 1, "at most the iteration in flight is run again"
    # retired: the scheduler no longer lists it, so it cannot rejoin this run
    assert address not in workers_info(client)
    # its nanny answered, so it killed the frozen process and started a fresh worker (which
    # a plain removal would not: thawed, the old worker would close, and its nanny with it)
    assert not _alive(freezer.pids[address]), "the frozen process was left frozen"
    client.wait_for_workers(2, timeout=120)
    assert address not in workers_info(client) and name in {str(w["name"]) for w in workers_info(client).values()}
    # the learner came back from its snapshot: its scale halved once per iteration, all of them
    assert run.state.fragments["learner"][0]["scale"] == 0.5**ITERATIONS


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
