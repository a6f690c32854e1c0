"""Embedded workers pinned one to a core when there are cores enough (workbench.cluster.pinning).

Cluster cases run in a process of their own: the embedded cluster is one per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from workbench.cluster import pinning
from workbench.cluster.pinning import PIN_VARIABLE, pinning_plugin, usable_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")

PROBE = textwrap.dedent("""
    import json, os, sys

    def threads_cores():
        import os
        return [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")]

    if __name__ == "__main__":
        from workbench.cluster.connect import embedded_cluster, shutdown_embedded
        handle = embedded_cluster(int(sys.argv[1]))
        workers = handle.client.run(threads_cores)
        names = {addr: info["name"] for addr, info in handle.client.scheduler_info()["workers"].items()}
        shutdown_embedded()
        print("FACTS" + json.dumps({"workers": {str(names[a]): c for a, c in workers.items()},
                                    "client": sorted(os.sched_getaffinity(0))}))
""")


def _facts(n_workers: int, pin: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PIN_VARIABLE}
    if pin is not None:
        env[PIN_VARIABLE] = pin
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(n_workers)], capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(l for l in out.stdout.splitlines() if l.startswith("FACTS"))[len("FACTS") :])


@pytest.mark.skipif(len(usable_cores()) < 2, reason="needs 2 cores to give 2 workers one each")
def test_two_workers_each_get_a_core_of_their_own_with_every_thread():
    facts = _facts(2, None)
    cores = usable_cores()
    for name, threads in facts["workers"].items():
        assert {tuple(c) for c in threads} == {(cores[int(name)],)}, (name, threads)
    assert facts["client"] == cores  # the notebook's process (scheduler, driver) is not pinned


@pytest.mark.parametrize("n_workers, pin", [(2, "0"), (len(usable_cores()) + 1, None)])
def test_not_pinned_when_turned_off_or_when_workers_outnumber_cores(n_workers, pin):
    facts = _facts(n_workers, pin)
    assert len(facts["workers"]) == n_workers
    for threads in facts["workers"].values():
        assert all(c == usable_cores() for c in threads), threads


def test_the_plugin_gives_each_worker_its_threads_cores(monkeypatch):
    monkeypatch.delenv(PIN_VARIABLE, raising=False)
    monkeypatch.setattr(pinning, "usable_cores", lambda: [3, 5, 8, 9])
    plugin = pinning_plugin(2, threads_per_worker=2)
    assert plugin.cores == [3, 5, 8, 9] and plugin.width == 2
    assert pinning_plugin(3, threads_per_worker=2) is None  # 6 threads, 4 cores
    assert pinning_plugin(4).cores == [3, 5, 8, 9]
    monkeypatch.setenv(PIN_VARIABLE, "yes")
    with pytest.raises(ValueError, match="WORKBENCH_PIN_WORKERS must be 0 or 1, got 'yes'"):
        pinning_plugin(2)


def test_pin_process_moves_every_thread_of_the_process():
    """In a child process with a second thread started before the pin: both move."""
    code = textwrap.dedent("""
        import json, os, threading
        from workbench.cluster.pinning import pin_process
        stop = threading.Event()
        waiter = threading.Thread(target=stop.wait)
        waiter.start()
        core = min(os.sched_getaffinity(0))
        pinned = pin_process({core})
        print(json.dumps({"pinned": pinned, "core": core, "threads": [
            sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")]}))
        stop.set()
        waiter.join()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    facts = json.loads(out.stdout)
    assert facts["pinned"] == len(facts["threads"]) >= 2
    assert all(cores == [facts["core"]] for cores in facts["threads"]), facts


def _threads_cores(dask_worker=None) -> list[list[int]]:
    return [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")]


@pytest.mark.skipif(len(usable_cores()) < 2, reason="needs 2 cores to give 2 workers one each")
def test_workers_started_apart_that_share_a_machine_get_cores_of_their_own(client):
    """A user's own workers (this LocalCluster is not workbench's embedded one: nothing
    pinned it) are pinned as the embedded cluster's are, every thread of each."""
    from workbench.cluster.worker_setup import ensure_worker_setup

    ensure_worker_setup(client)  # what every run on a cluster does first
    cores = client.run(_threads_cores)
    assigned = sorted({tuple(c) for threads in cores.values() for c in threads})
    assert len(assigned) == 2 and all(len(c) == 1 for c in assigned), cores  # one core each, all threads
    assert pinning.pin_shared_machines(client) == {}  # pinned already: nothing more to do


def test_workers_in_the_clients_own_process_are_never_pinned():
    """A LocalCluster(processes=False) runs its workers as threads of this process: pinning
    one would pin every thread of the notebook (it did: the whole test session on one core)."""
    from distributed import Client, LocalCluster

    before = usable_cores()
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        assert pinning.pin_shared_machines(c) == {}
    assert usable_cores() == before and all(len(c) == len(before) for c in _threads_cores())
