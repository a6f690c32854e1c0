"""A cell that never returns cannot wedge the session: a stop returns within a bounded
time, names the cell, leaves nothing running, and the next run works at once.

On a cluster the stuck worker's process is ended and its nanny starts a fresh one; the
stop does not wait for that (a worker's start-up took ~20 s of the old ~31 s stop), the
next run does. Timing is checked by the order of events, not by durations: the stop
returned before the restarted workers joined the scheduler (its ``add-worker`` events); a
gate (``tests/live/join_gate.py``) holds a restarted worker until the stop returned, so a
busy machine cannot flip that order. Wall-clock bounds here are hang guards only.
"""

from __future__ import annotations

import _thread
import logging
import os
import threading
import time

import numpy as np
import pytest

import workbench as wb
from tests.conftest import two_worker_client
from tests.live.join_gate import GATE_ENV
from workbench.runtime.engine.driver import STOP_GRACE_S

STUCK_STEP = """\
seen += 1
if seen > 6 and stuck:
    open(marker, "a").close()            # the test waits for this: the cell is stuck now
    while not os.path.exists(release):   # does not return (until the test ends)
        time.sleep(0.05)
obs = obs + 1
reward = obs.copy()
"""
#: a hang guard, not a speed check: the grace, then teardown (about 2 s when quiet)
RETURN_BOUND_S = STOP_GRACE_S + 50
#: how long a run may take to get a cell stuck (deploying on a busy machine included)
STUCK_WITHIN_S = 120


def sticky_fdg(release: str, marker: str) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "time": time, "os": os, "stuck": True, "release": release, "marker": marker})
    fdg.add_fragment("env", "obs = np.zeros(2)\nseen = 0", rate="init")
    fdg.add_fragment("env", STUCK_STEP, rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "total += float(reward.sum())", rate="iteration")
    return fdg


@pytest.fixture(scope="module")
def gated_cluster(tmp_path_factory):
    """(client, gate folder): this module's 2-worker cluster, whose workers pass the join gate."""
    folder = tmp_path_factory.mktemp("join-gate")
    with two_worker_client(env={GATE_ENV: str(folder)}, preload=["tests.live.join_gate"]) as c:
        yield c, folder


@pytest.fixture
def client(gated_cluster):
    return gated_cluster[0]


class Gate:
    """Arm before a stop (a worker restarted from then on waits), open once it returned."""

    def __init__(self, folder) -> None:
        self.armed, self.opened = folder / "armed", folder / "open"

    def arm(self) -> None:
        self.opened.unlink(missing_ok=True)
        self.armed.touch()

    def open(self) -> None:
        self.opened.touch()


@pytest.fixture
def gate(gated_cluster):
    gate = Gate(gated_cluster[1])
    yield gate
    gate.open()  # a test that failed before opening it holds no worker back
    gate.armed.unlink(missing_ok=True)


@pytest.fixture
def paths(tmp_path):
    """(release, marker): writing ``release`` lets a stuck cell return; ``marker`` appears
    when a cell gets stuck. Released at the end: an abandoned thread ends, no thread of
    this process outlives the test."""
    release, marker = tmp_path / "release", tmp_path / "stuck"
    yield str(release), str(marker)
    release.write_text("")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(t.name.startswith("workbench-") for t in threading.enumerate()):
        time.sleep(0.1)


def _wait_for(path: str, timeout: float = STUCK_WITHIN_S) -> bool:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_stop_returns_with_a_stuck_cell_named_and_the_fdg_runs_again(policy, client, gate, capsys, paths):
    release, marker = paths
    fdg = sticky_fdg(release, marker)
    result = {}

    def run() -> None:
        result["run"] = fdg.run(iterations=1000, steps=3, policy=policy, cluster=client, progress=False)
        result["returned"] = time.time()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert _wait_for(marker), "the env's step cell never got stuck"
    gate.arm()
    asked, asked_wall = time.monotonic(), time.time()
    fdg.stop()
    thread.join(timeout=RETURN_BOUND_S)
    assert not thread.is_alive(), "stop did not return"
    assert time.monotonic() - asked < RETURN_BOUND_S
    gate.open()
    run = result["run"]
    assert run.status == "stopped" and not fdg.running
    out = capsys.readouterr().out
    assert "the env step cell (replica 0" in out and "has not returned" in out
    if policy == "coarse":
        assert "restarting worker" in out and "the next run waits for it" in out
        _assert_returned_before_the_restart(client, asked_wall, result["returned"])
    _assert_runs_again(fdg, policy, client)


def test_ctrl_c_with_a_stuck_coarse_cell_returns_and_the_fdg_runs_again(client, gate, capsys, paths):
    """Ctrl-C in the thread driving the run (a notebook's foreground run): the loops get
    the grace, the stuck cell is named, its worker is restarted without waiting."""
    release, marker = paths
    fdg = sticky_fdg(release, marker)
    asked = {}

    def interrupt_when_stuck() -> None:
        _wait_for(marker)  # if it never sticks, interrupt anyway: the asserts say why
        gate.arm()
        asked["at"], asked["wall"] = time.monotonic(), time.time()
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_stuck, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        fdg.run(iterations=1000, steps=3, policy="coarse", cluster=client, progress=False)
    returned = time.time()
    gate.open()
    assert time.monotonic() - asked["at"] < RETURN_BOUND_S
    assert fdg.last_run.status == "interrupted" and not fdg.running
    out = capsys.readouterr().out
    assert "the env step cell (replica 0" in out and "has not returned" in out
    assert "restarting worker" in out
    _assert_returned_before_the_restart(client, asked["wall"], returned)
    _assert_runs_again(fdg, "coarse", client)


def test_a_plan_right_after_a_stuck_cells_stop_waits_for_the_restarted_worker(client, capsys, paths):
    """``fdg.plan`` straight after the stop: it waits for the worker the stop restarted
    (saying so), so the plan places on both workers, as the next run would."""
    release, marker = paths
    fdg = sticky_fdg(release, marker)
    thread = threading.Thread(
        target=lambda: fdg.run(iterations=1000, steps=3, policy="coarse", cluster=client, progress=False), daemon=True
    )
    thread.start()
    assert _wait_for(marker), "the env's step cell never got stuck"
    fdg.stop()
    thread.join(timeout=RETURN_BOUND_S)
    assert not thread.is_alive(), "stop did not return"
    assert "restarting worker" in capsys.readouterr().out
    plan = fdg.plan("coarse", cluster=client)
    assert {w for g in plan.policy.groups for w in g.workers} == {"0", "1"}
    fdg.namespace["stuck"] = False
    _assert_runs_again(fdg, "coarse", client)


def test_reset_during_a_stuck_background_run_is_refused_at_once_and_stop_ends_it(ip, client, gate, capsys, paths):
    """``%fdg reset`` while a background run's cell is stuck returns at once (it refuses:
    the run holds the FDG) and says to stop first; ``%fdg stop`` then returns within the
    bound, and the reset works."""
    from IPython.core.error import UsageError

    release, marker = paths
    ip.user_ns.update(os=os, time=time, stuck=True, release=release, marker=marker)
    for line, code in (
        ("env --init", "obs = np.zeros(2)\nseen = 0"),
        ("env", STUCK_STEP),
        ("learner --init", "total = 0.0"),
        ("learner", "total += float(reward.sum())"),
    ):
        ip.run_cell_magic("fragment", line, code)
    ip.run_line_magic(
        "fdg",
        f"run --background --policy coarse --cluster {client.scheduler.address} "
        "--iterations 1000 --steps 3 --no-progress",
    )
    assert _wait_for(marker), "the env's step cell never got stuck"
    gate.arm()
    asked, asked_wall = time.monotonic(), time.time()
    with pytest.raises(UsageError, match="stop the run first"):
        ip.run_line_magic("fdg", "reset")
    assert time.monotonic() - asked < 5, "%fdg reset waited on the stuck cell"
    run = ip.run_line_magic("fdg", "stop")
    assert time.monotonic() - asked < RETURN_BOUND_S
    assert run is not None and run.status == "stopped"
    returned = time.time()
    gate.open()
    out = capsys.readouterr().out
    assert "has not returned" in out and "restarting worker" in out, out
    _assert_returned_before_the_restart(client, asked_wall, returned)
    ip.run_line_magic("fdg", "reset")
    assert "FDG reset" in capsys.readouterr().out
    magics = ip.magics_manager.registry["WorkbenchMagics"]
    assert len(magics.fdg) == 0
    _wait_until_restarted(client)


def test_a_worker_without_a_nanny_is_named_with_what_to_do(capsys, paths):
    """Workers without a nanny (here an in-process LocalCluster's) cannot be restarted:
    the stop says so and what to do, returns, and the next run still works; once the cell
    returns, its loop sees the stop and ends (no thread left behind)."""
    from distributed import Client, LocalCluster

    release, marker = paths
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as bare,
    ):
        fdg = sticky_fdg(release, marker)
        result = {}
        thread = threading.Thread(
            target=lambda: result.update(
                run=fdg.run(iterations=1000, steps=3, policy="coarse", cluster=bare, progress=False)
            ),
            daemon=True,
        )
        thread.start()
        assert _wait_for(marker), "the env's step cell never got stuck"
        asked = time.monotonic()
        fdg.stop()
        thread.join(timeout=RETURN_BOUND_S)
        assert not thread.is_alive() and time.monotonic() - asked < RETURN_BOUND_S
        assert result["run"].status == "stopped"
        out = capsys.readouterr().out
        assert "has not returned" in out and "has no nanny" in out and "Restart that dask worker" in out
        fdg.namespace["stuck"] = False
        again = fdg.run(iterations=3, steps=3, policy="coarse", cluster=bare, progress=False)
        assert again.status == "finished" and again.completed_iterations == 3
        with open(release, "w"):
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(bare.run(_cells_running).values()):
            time.sleep(0.1)
        assert not any(bare.run(_cells_running).values()), "the stuck cell's loop did not end"


# -- checks -------------------------------------------------------------------------------
def _assert_returned_before_the_restart(client, asked_wall: float, returned_wall: float) -> None:
    """No worker joined the scheduler between the stop and its return: the stop did not
    wait for the restarted worker (the old code's restart_workers did, ~20 s). Then one
    does join, after the return (the stuck worker was restarted, not just removed)."""
    joined = _joins(client, asked_wall)
    assert not [t for t in joined if t <= returned_wall], (
        f"workers joined {[round(t - asked_wall, 1) for t in joined]} s after the stop, which returned "
        f"{returned_wall - asked_wall:.1f} s after it: the stop waited for the restart"
    )
    _wait_until_restarted(client)
    assert [t for t in _joins(client, asked_wall) if t > returned_wall], "no worker was restarted"


def _assert_runs_again(fdg: wb.FDG, policy: str, client) -> None:
    """The FDG runs again at once, and afterwards nothing of either run is left."""
    fdg.namespace["stuck"] = False
    again = fdg.run(iterations=3, steps=3, policy=policy, cluster=client, progress=False)
    assert again.status == "finished" and again.completed_iterations == 3
    if policy == "coarse":
        # placed on both workers: it waited for the restarted one rather than run without it
        assert {w for g in again.policy.groups for w in g.workers} == {"0", "1"}
        assert not any(client.run(_deployed).values()), "a replica stayed deployed"
        assert not any(client.run(_cells_running).values()), "a worker still runs a cell"
        assert not any(client.processing().values()), "a worker still has a task"
        # the stuck loops' tasks could only run on the ended workers: cancelled, not left
        # waiting for those addresses (a task and a future per stuck loop, for good)
        deadline = time.monotonic() + 10  # the scheduler forgets released tasks asynchronously
        while time.monotonic() < deadline and (client.futures or client.run_on_scheduler(_task_count)):
            time.sleep(0.05)
        assert not client.futures and not client.run_on_scheduler(_task_count), "a stuck loop's task was kept"


def _wait_until_restarted(client, workers: int = 2) -> None:
    client.wait_for_workers(workers, timeout=120)


def _joins(client, since: float) -> list[float]:
    """When workers joined the scheduler (its add-worker events) since ``since``."""
    return sorted(
        t
        for t, msg in client.get_events("all")
        if isinstance(msg, dict) and msg.get("action") == "add-worker" and t >= since
    )


def _task_count(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def _deployed(dask_worker=None) -> int:
    plugin = dask_worker.plugins.get("workbench")
    return len(getattr(plugin, "deployed", {}))


def _cells_running(dask_worker=None) -> list[str]:
    """The fragment cells some thread of this worker's process is executing (their code's
    file names are ``<fragment NAME:RATE>``)."""
    import sys

    running = []
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_filename.startswith("<fragment "):
                running.append(frame.f_code.co_filename)
            frame = frame.f_back
    return running
