"""The embedded cluster's workers are forked from a server that imported torch once
(workbench.cluster.forkserver), and WORKBENCH_START_METHOD chooses that or Dask's spawn.

Each case runs in a process of its own: the embedded cluster, and multiprocessing's
forkserver, are one per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.cluster.forkserver import START_METHOD_VARIABLE, start_method

PROBE = textwrap.dedent("""
    import json, os, sys
    import psutil

    def facts():
        import gc, sys, os, psutil
        return {"parent": psutil.Process(os.getppid()).cmdline(), "torch": "torch" in sys.modules,
                "omp": os.environ.get("OMP_NUM_THREADS"), "hash": hash("workbench"),
                "frozen": gc.get_freeze_count()}

    if __name__ == "__main__":
        from workbench.cluster.connect import embedded_cluster, shutdown_embedded
        handle = embedded_cluster(2)
        workers = list(handle.client.run(facts).values())
        # a worker the nanny restarts comes back the same way (restarted after the start's settings ended)
        handle.client.restart_workers(list(handle.client.scheduler_info()["workers"])[:1])
        workers += list(handle.client.run(facts).values())
        shutdown_embedded()
        print("FACTS" + json.dumps(workers))
""")


def _workers(method: str | None) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != START_METHOD_VARIABLE}
    if method is not None:
        env[START_METHOD_VARIABLE] = method
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("FACTS"))
    return json.loads(line[len("FACTS") :])


def test_workers_are_forked_from_a_server_that_preloaded_torch():
    workers = _workers(None)
    assert len(workers) == 4  # and a restarted one came back (Dask's default start, outside the start's settings)
    for facts in workers[:2]:
        parent = " ".join(facts["parent"])
        assert "forkserver" in parent, parent
        # the server's environment came from the nanny's pre-spawn settings: pools start at one thread
        assert facts["omp"] == "1"
        assert facts["torch"]
        # the server froze what its imports made (workbench.cluster.frozen_heap): the worker
        # inherited that generation, which its collections (and its exit) never walk
        assert facts["frozen"] > 10_000, facts["frozen"]
    # Dask fixes the workers' hash seed (so they hash keys alike): the server started early keeps it
    assert len({facts["hash"] for facts in workers}) == 1


def test_spawn_keeps_a_fresh_python_per_worker():
    for facts in _workers("spawn")[:2]:
        # the nannies live in the client's process: a spawned worker is its child
        assert facts["parent"][1:2] == ["-c"] and "forkserver" not in " ".join(facts["parent"]), facts["parent"]
        assert facts["frozen"] == 0  # a fresh Python: nothing frozen


def test_the_start_method_variable_is_checked(monkeypatch):
    monkeypatch.setenv(START_METHOD_VARIABLE, " Spawn ")
    assert start_method() == "spawn"
    monkeypatch.setenv(START_METHOD_VARIABLE, "")
    assert start_method() == "forkserver"
    monkeypatch.setenv(START_METHOD_VARIABLE, "fork")
    with pytest.raises(ValueError, match="WORKBENCH_START_METHOD must be forkserver or spawn, got 'fork'"):
        start_method()


def test_a_wrong_start_method_is_one_clear_error_from_the_command_line(tmp_path):
    quickstart = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
    env = {**os.environ, START_METHOD_VARIABLE: "fork"}
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", str(quickstart), "--policy", "coarse", "--iterations", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert "WORKBENCH_START_METHOD must be forkserver or spawn, got 'fork'" in out.stderr
    assert "Traceback" not in out.stderr
