"""The placement board, driven as its front end drives it: the same message dicts
placement.js sends, and traits set from the page, against a real 2-worker LocalCluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import workbench as wb
from tests.conftest import toy_fdg
from workbench.cluster._dask_compat import workers_info
from workbench.errors import PlacementError
from workbench.fdg.policy import Group
from workbench.runtime.state.run import Run
from workbench.widgets.placement import PlacementBoard


def send(board: PlacementBoard, **content) -> None:
    """What a message from the page does: the comm hands it to the widget's callbacks."""
    board._handle_custom_msg(content, [])


def wait_for(condition, seconds: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {seconds:g} s waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def board(client):
    fdg = toy_fdg()
    b = PlacementBoard(fdg, client)
    yield b
    b.close()


def test_the_board_shows_fragments_traffic_and_the_cluster(board):
    assert board.policy.name == "SingleLearnerCoarse"
    assert board.fdg.placement == board.policy  # the board's state is the FDG's placement
    assert [w["name"] for w in board.workers] == ["0", "1"]
    assert all(w["gpus"] == 0 and w["nthreads"] == 1 and not w["left"] for w in board.workers)
    rows = {row["name"]: row for row in board.fragments}
    assert list(rows) == ["env", "learner", "actor"]
    assert rows["env"]["group"] == "actor+env" and rows["env"]["replicas"] == 2
    assert rows["learner"]["rates"] == ["init", "iteration"]
    # env's rewards cross to the learner stacked [T, …]: 128 steps × 3 float64 = 3,072 bytes
    (reward,) = rows["env"]["sends"]
    assert reward["name"] == "reward" and reward["to"] == ["learner"] and reward["bytes"] == 3072
    assert reward["text"] == "3.0 KiB" and "stacked" in reward["timing"] and reward["spatial"] == "gather"
    assert rows["actor"]["sends"] == []  # actor and env are fused: nothing crosses
    assert board.wire.endswith("KiB")
    assert board.status.startswith("not running")
    # colours: one per group, shared by the fragments it fuses
    assert rows["env"]["color"] == rows["actor"]["color"] != rows["learner"]["color"]


def test_steps_set_from_the_page_rescale_the_traffic(board):
    board.steps = 10  # what the page's "steps" input does (model.set + save_changes)
    env = next(r for r in board.fragments if r["name"] == "env")
    assert env["sends"][0]["bytes"] == 240
    board.steps = 0
    assert board.steps == 10 and board.message["level"] == "error" and "≥ 1" in board.message["text"]
    assert board.fdg.placement_steps == 10  # what a bare %fdg run then uses


def test_a_bare_fdg_run_uses_the_boards_steps(ip, capsys):
    """The board showed traffic for T steps; %fdg run without --steps runs T (it used to run
    the default 128 while the board said 32), and says so."""
    for cell in ("%%fragment env --init\nx = 0\n", "%%fragment env\nx = x + 1\n"):
        assert ip.run_cell(cell).success
    fdg = ip.magics_manager.registry["WorkbenchMagics"].fdg
    fdg.placement_steps = 32  # what the board does when it opens or its steps change
    run = ip.run_line_magic("fdg", "run --iterations 1 --no-progress")
    assert run.steps == 32 and "steps: the placement board's, 32 per iteration" in capsys.readouterr().out
    assert ip.run_line_magic("fdg", "run --iterations 1 --steps 5 --no-progress").steps == 5
    ip.run_line_magic("fdg", "reset")
    assert fdg.placement_steps is None


def test_drop_moves_a_fragment_and_drops_again_move_it_on(board):
    send(board, type="drop", fragment="learner", worker="1", device="cpu")
    assert board.policy.group_of("learner").workers == ("1",)
    assert board.message["level"] == "ok" and board.message["text"] == "learner → 1 (cpu)"
    assert board.fdg.placement == board.policy
    # env leaves actor+env and joins the learner's single replica on worker 1
    send(board, type="drop", fragment="env", worker="1", device="cpu")
    assert board.policy.group_of("env").fragments == ("env", "learner")
    assert board.policy.group_of("actor").replicas == 2
    assert {g["name"] for g in board.groups} == {"env+learner", "actor"}
    assert '"env",\n        "learner"' in board.policy_json


@pytest.mark.parametrize(
    "content, reason",
    [
        ({"fragment": "learner", "worker": "0", "device": "gpu"}, "has no GPU"),
        ({"fragment": "learner", "worker": "w9", "device": "cpu"}, "not in the cluster"),
        ({"fragment": "learner", "worker": "1", "device": "tpu"}, "device must be"),
        ({"fragment": "critic", "worker": "1", "device": "cpu"}, "does not place fragment 'critic'"),
    ],
)
def test_refused_drops_show_the_reason_and_keep_the_policy(board, content, reason):
    before, placed = board.policy, board.fdg.placement
    send(board, type="drop", **content)
    assert board.message["level"] == "error" and reason in board.message["text"]
    assert board.policy == before and board.fdg.placement == placed


def test_replica_counts(board):
    send(board, type="replicas", fragment="learner", count=2)
    assert board.policy.group_of("learner").replicas == 2
    assert board.policy.group_of("learner").workers == ("0", "1")
    send(board, type="replicas", fragment="learner", count=1)
    before = board.policy
    serial = board.message["serial"]
    for bad in (0, -1, 2.5, "three", None, True):
        send(board, type="replicas", fragment="actor", count=bad)
        assert board.message["level"] == "error" and "whole number ≥ 1" in board.message["text"]
        assert board.message["serial"] > serial  # a repeated refusal is still news to the page
        serial = board.message["serial"]
    # learner ×2 cannot feed actor ×3 (m → n replicas need m = n or one side 1)
    send(board, type="replicas", fragment="learner", count=2)
    mid = board.policy
    send(board, type="replicas", fragment="actor", count=3)
    assert "cannot feed" in board.message["text"] and board.policy == mid != before


@pytest.mark.parametrize(
    "preset, name",
    [
        ("coarse", "SingleLearnerCoarse"),
        ("fine", "SingleLearnerFine"),
        ("multilearner", "MultiLearner"),
        ("gpuonly", "GPUOnly"),
        ("async", "Async"),
        ("pipelined", "Pipelined"),
    ],
)
def test_presets_fill_the_board(board, preset, name):
    send(board, type="replicas", fragment="learner", count=2)  # something to replace
    send(board, type="preset", name=preset)
    assert board.policy.name == name and board.fdg.placement == board.policy
    assert board.message["level"] == "ok" and board.policy_name == name
    placed = {f for g in board.groups for f in g["fragments"]}
    assert placed == {"env", "learner", "actor"}
    assert all(set(g["workers"]) <= {"0", "1"} for g in board.groups)
    assert board.asynchronous == (preset == "async") and board.lag == (preset == "pipelined")


def test_auto_is_chosen_at_run_time_or_taken_from_the_last_auto_run(board):
    before = board.policy
    send(board, type="preset", name="auto")
    assert board.message["level"] == "error" and "chosen at run time" in board.message["text"]
    assert "SingleLearnerCoarse" in board.message["text"] and board.policy == before
    last = Run("auto → MultiLearner", 10, 4)
    last.auto_table = [
        {"policy": "SingleLearnerCoarse", "rate": 900.0, "unit": "env-steps/s"},
        {"policy": "MultiLearner", "rate": 1500.0, "unit": "env-steps/s"},
    ]
    board.fdg.last_run = last
    send(board, type="preset", name="auto")
    assert board.policy.name == "MultiLearner" and "fastest" in board.message["text"]
    send(board, type="preset", name="inline")
    assert "unknown preset 'inline'" in board.message["text"] and board.policy.name == "MultiLearner"


def test_json_round_trip_and_import(board, client):
    send(board, type="drop", fragment="learner", worker="1", device="cpu")
    text = board.to_json()
    assert wb.Policy.from_json(text) == board.policy
    other = PlacementBoard(toy_fdg(), client)
    try:
        assert other.policy.name == "SingleLearnerCoarse"
        assert other.load_json(text) == board.policy == other.policy
        send(other, type="preset", name="multilearner")
        send(other, type="import", text=text)  # the page's Import → Apply
        assert other.policy == board.policy and other.message["text"] == "imported"
    finally:
        other.close()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{nope", "malformed"),
        ('{"name": "x"}', "malformed"),
        ('{"name": "x", "groups": [{"fragments": ["actor", "env"], "replicas": 0}]}', "≥ 1"),
        (
            '{"name": "x", "groups": [{"fragments": ["actor", "env", "learner"], "workers": ["9"]}]}',
            "not in the cluster",
        ),
        (
            '{"name": "x", "groups": [{"fragments": ["actor", "env"], "workers": ["0"]}]}',
            "does not place fragment 'learner'",
        ),
        ('{"name": "x", "groups": [{"fragments": ["actor", "env", "learner"]}]}', "no workers"),
        (
            '{"name": "x", "groups": [{"fragments": ["actor", "env", "learner"], "workers": ["local"]}]}',
            "calling process",
        ),
    ],
)
def test_bad_json_is_refused_and_the_policy_stays(board, text, reason):
    before = board.policy
    send(board, type="import", text=text)
    assert board.message["level"] == "error" and reason in board.message["text"]
    assert board.policy == before and board.fdg.placement == before
    with pytest.raises(PlacementError, match=reason):
        board.load_json(text)
    assert board.policy == before


def test_the_policy_is_settable_from_python(board, client):
    from workbench.cluster.connect import inventory_of

    multi = wb.MultiLearner().place(board.fdg, inventory_of(client))
    board.policy = multi
    assert board.policy == multi == board.fdg.placement and board.policy_name == "MultiLearner"
    with pytest.raises(PlacementError, match="not in the cluster"):
        board.policy = wb.Policy("elsewhere", (Group(("env", "actor", "learner"), 1, ("w7",)),))
    assert board.policy == multi and "not in the cluster" in board.message["text"]


def test_the_board_starts_from_the_fdgs_placement_when_it_still_fits(client):
    fdg = toy_fdg()
    fdg.placement = wb.Policy("mine", (Group(("env", "actor", "learner"), 1, ("1",)),))
    board = PlacementBoard(fdg, client)
    try:
        assert board.policy == fdg.placement and board.policy.name == "mine"
    finally:
        board.close()
    fdg.placement = wb.Policy("gone", (Group(("env", "actor", "learner"), 1, ("w9",)),))
    board = PlacementBoard(fdg, client)
    try:
        assert board.policy.name == "SingleLearnerCoarse" and fdg.placement == board.policy
        assert board.message["level"] == "info" and "no longer fits" in board.message["text"]
    finally:
        board.close()


def test_unknown_messages_are_answered_not_raised(board):
    send(board, type="teleport", fragment="actor")
    assert board.message["level"] == "error" and "does not know" in board.message["text"]


def test_the_board_on_the_ppo_fdg(client):
    from workbench.algorithms import ppo

    board = PlacementBoard(ppo.build_fdg(), client, steps=16)
    try:
        rows = {row["name"]: row for row in board.fragments}
        sent = {s["name"]: s for row in rows.values() for s in row["sends"]}
        # actor+env hand the learner their step values stacked, the learner broadcasts weights
        assert {"obs", "reward", "action", "logp", "value"} <= set(sent)
        assert sent["weights"]["to"] == ["actor"] and sent["weights"]["bytes"] > 1000
        assert all(s["bytes"] > 0 for s in sent.values() if s["timing"] != "once at init")
        send(board, type="drop", fragment="learner", worker="1", device="cpu")
        assert board.policy.group_of("learner").workers == ("1",)
    finally:
        board.close()


def _start_worker(address: str, name: str, *extra: str) -> subprocess.Popen:
    exe = shutil.which("dask") or shutil.which("dask-worker")
    cmd = [exe, "worker"] if exe and exe.endswith("dask") else [sys.executable, "-m", "distributed.cli.dask_worker"]
    return subprocess.Popen(
        [
            *cmd,
            address,
            "--name",
            name,
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--host",
            "127.0.0.1",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_workers_that_join_and_leave_show_on_the_board(board, client):
    """A worker with a (declared) GPU joins: its GPU slot appears and takes the learner; it
    leaves: the board shows it as left, refuses drops on it, and a preset recovers."""
    names = lambda: [w["name"] for w in board.workers if not w["left"]]  # noqa: E731
    worker = _start_worker(client.scheduler.address, "gpu-box", "--resources", "GPU=1")
    try:
        wait_for(lambda: "gpu-box" in names(), what="the new worker on the board")
        box = next(w for w in board.workers if w["name"] == "gpu-box")
        assert box["gpus"] == 1
        send(board, type="drop", fragment="learner", worker="gpu-box", device="gpu")
        assert board.policy.group_of("learner") == Group(("learner",), 1, ("gpu-box",), "gpu")
        assert board.message["level"] == "ok"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    wait_for(lambda: "gpu-box" not in names(), what="the worker to leave the board")
    left = [w for w in board.workers if w["left"]]
    assert [w["name"] for w in left] == ["gpu-box"]  # still holds the learner: shown as left
    before = board.policy
    send(board, type="drop", fragment="actor", worker="gpu-box", device="cpu")
    assert "not in the cluster" in board.message["text"] and board.policy == before
    send(board, type="preset", name="coarse")
    assert [w["name"] for w in board.workers] == ["0", "1"]
    wait_for(lambda: len(workers_info(client)) == 2, what="the scheduler to forget the worker")


def test_an_empty_cluster_fills_the_board_when_workers_join():
    import logging

    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=0,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        board = PlacementBoard(toy_fdg(), c)
        try:
            assert board.policy is None and board.workers == [] and "no preset fits" in board.message["text"]
            send(board, type="drop", fragment="learner", worker="0", device="cpu")
            assert "no placement yet" in board.message["text"] and board.policy is None
            cluster.scale(2)
            wait_for(lambda: board.policy is not None and len(board.workers) == 2, what="workers to join")
            assert board.policy.name == "SingleLearnerCoarse" and board.fdg.placement == board.policy
            assert "workers joined" in board.message["text"]
        finally:
            board.close()


def test_closing_the_board_stops_following_the_cluster(client):
    board = PlacementBoard(toy_fdg(), client)
    assert board._poller.is_alive()
    board.close()
    assert not board._poller.is_alive() and board.comm is None
    assert client.status == "running"  # the notebook's client is not the board's to close


@pytest.mark.skipif(
    not hasattr(wb.FDG, "replace") or not hasattr(wb.FDG, "running"),
    reason="workbench.FDG.replace(policy) / .running are not there yet (the lead adds them)",
)
def test_a_change_during_a_run_reaches_it_at_the_next_iteration(client):
    fdg = toy_fdg(time=time)
    fdg.add_fragment(
        "learner",
        "total += float(reward.sum())\nbatch = reward.shape\n"
        "wb.log('learner/total', total)\nscale = scale * 0.5\ntime.sleep(0.02)",
        rate="iteration",
    )
    board = PlacementBoard(fdg, client)
    replaced = []
    original = fdg.replace
    fdg.replace = lambda policy: (replaced.append(policy), original(policy))[1]
    runner = threading.Thread(
        target=fdg.run,
        kwargs=dict(iterations=100_000, steps=2, policy=board.policy, cluster=client, progress=False),
        daemon=True,
    )
    runner.start()
    try:
        wait_for(lambda: fdg.running, what="the run to start")
        wait_for(lambda: board.running, seconds=5, what="the board to see the run")
        assert board.status == "running — changes apply at the next iteration"
        send(board, type="drop", fragment="learner", worker="1", device="cpu")
        assert board.message["level"] == "ok", board.message
        assert "next iteration" in board.message["text"]
        assert replaced == [board.policy] and board.policy.group_of("learner").workers == ("1",)
    finally:
        fdg.stop()
        runner.join(timeout=60)
        board.close()
    assert fdg.last_run.status in ("stopped", "finished")


def test_front_end_files_are_bundled_and_fetch_nothing():
    here = Path(wb.__file__).parent / "widgets"
    esm, css = here / "placement.js", here / "placement.css"
    js = esm.read_text()
    assert str(PlacementBoard._esm) == js and str(PlacementBoard._css) == css.read_text()  # read by anywidget
    assert not re.search(r"^\s*import\b|\bimport\s*\(", js, flags=re.M)  # no static or dynamic imports
    assert "http" not in js and "export default" in js
    for kind in ("drop", "replicas", "preset", "import"):
        assert f'type: "{kind}"' in js
    assert "dragstart" in js and "dragover" in js and "model.save_changes" in js
    assert "var(--jp-layout-color0" in css.read_text() and "http" not in css.read_text()
    node = shutil.which("node")
    if node:  # the module parses (as the browser loads it: an ES module)
        check = subprocess.run([node, "--input-type=module", "--check"], input=js, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr


def test_a_board_whose_scheduler_stops_answering_says_so_and_comes_back(board):
    """The poll fails: the board says the cluster is unreachable (its front end then takes
    no drags); the next poll that succeeds makes it live again."""
    answer = board._inventory_of

    def unreachable(client):
        raise OSError("Timed out trying to connect")

    board._inventory_of = unreachable
    wait_for(lambda: not board.cluster_live, what="the board to say the cluster is unreachable")
    assert board.status.startswith("cluster unreachable (OSError: Timed out trying to connect)")
    assert "dragging is off" in board.status
    board._inventory_of = answer
    wait_for(lambda: board.cluster_live, what="the board to be live again")
    assert board.status.startswith("not running")
