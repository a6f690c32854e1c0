"""Many short runs on one cluster leak nothing: the quick form of ``benchmarks/soak.py``.

Each run deploys replicas (socket servers and their threads), submits loop tasks and listens
to the loops' reports; after it, the workers and this process must be back where they were.
Counts are compared between run 5 (everything warmed up) and run 20. (The event topics the
scheduler keeps per run are for the /workbench page: the soak checks that they stay bounded.)
"""

from __future__ import annotations

import os
import time

import pytest

from tests.conftest import toy_fdg

RUNS, WARM = 20, 5
SLACK_THREADS, SLACK_FDS = 2, 4


def _stats(pid: int) -> dict[str, int]:
    """Threads and open fds of a local process: the least of a few reads 0.1 s apart, so a
    thread that is just exiting (a loop ending) is not counted."""
    import psutil

    proc = psutil.Process(pid)
    reads = []
    for _ in range(3):
        reads.append({"threads": proc.num_threads(), "fds": len(os.listdir(f"/proc/{pid}/fd"))})
        time.sleep(0.1)
    return {k: min(r[k] for r in reads) for k in reads[0]}


def _scheduler(dask_scheduler=None) -> dict[str, int]:
    topics = getattr(getattr(dask_scheduler, "_broker", None), "_topics", {})
    return {"tasks": len(dask_scheduler.tasks), "topics": sum(1 for t in topics if str(t).startswith("workbench"))}


def _deployed(dask_worker=None) -> int:
    plugin = dask_worker.plugins.get("workbench")
    return len(getattr(plugin, "deployed", {})) if plugin is not None else 0


def _sample(client, pids: dict[str, int]) -> dict:
    deadline = time.monotonic() + 5  # the scheduler forgets a run's tasks asynchronously
    while time.monotonic() < deadline and (client.futures or client.run_on_scheduler(_scheduler)["tasks"]):
        time.sleep(0.05)
    out = {name: _stats(pid) for name, pid in pids.items()}
    out.update(client.run_on_scheduler(_scheduler))
    out["futures"] = len(client.futures)
    out["handlers"] = sum(1 for t in getattr(client, "_event_handlers", {}) if str(t).startswith("workbench"))
    out["deployed"] = sum(client.run(_deployed).values())
    return out


def _worker_pids(client) -> dict[str, int]:
    return {f"worker {addr}": pid for addr, pid in client.run(os.getpid).items()}


@pytest.fixture(scope="module")
def short_runs(client):
    """Samples after run WARM and run RUNS of one toy FDG, coarse, 3 iterations each."""
    pytest.importorskip("psutil")
    pids = {**_worker_pids(client), "this process": os.getpid()}
    fdg = toy_fdg()
    samples = {}
    for number in range(1, RUNS + 1):
        run = fdg.run(iterations=3, steps=2, policy="coarse", cluster=client, progress=False)
        assert run.status == "finished"
        # the counts below are per process: say so if one was replaced (CI once saw a
        # worker's process gone here, with no more than psutil's NoSuchProcess to go on)
        now = _worker_pids(client)
        assert all(now.get(name) == pid for name, pid in pids.items() if name.startswith("worker")), (
            f"a worker process was replaced during short run {number}: {pids} -> {now}; the run's events: {run.events}"
        )
        if number in (WARM, RUNS):
            samples[number] = _sample(client, pids)
    return samples[WARM], samples[RUNS], [p for p in pids]


def test_short_runs_leak_no_threads_fds_futures_or_replicas(short_runs):
    first, last, processes = short_runs
    for name in processes:
        assert last[name]["threads"] <= first[name]["threads"] + SLACK_THREADS, (name, first[name], last[name])
        assert last[name]["fds"] <= first[name]["fds"] + SLACK_FDS, (name, first[name], last[name])
    assert last["futures"] == 0 and last["tasks"] == 0 and last["deployed"] == 0, last


def test_short_runs_leave_no_event_handlers_and_few_topics(short_runs):
    """Dask's unsubscribe_topic keeps the client's handler; teardown drops it, and the
    scheduler keeps the events of the last KEEP_TOPICS runs only."""
    from workbench.cluster.backend import KEEP_TOPICS

    first, last, _ = short_runs
    assert last["handlers"] <= first["handlers"], (first, last)
    assert last["topics"] <= KEEP_TOPICS + 1, last  # + the last run's, while its unsubscribe travels
