"""The placement board in a real JupyterLab, driven by headless chromium.

A notebook starts a 2-worker LocalCluster on loopback, builds the PPO FDG and shows
``wb.placement(fdg, client)``; the browser drags the learner onto worker 1's CPU and
imports malformed JSON (refused on the board); a cell then prints the kernel's
``board.policy``, which the test reads from the page.

Needs Debian's chromium (/usr/bin/chromium) and playwright-core in tests/browser/node_modules
(``.ci/browser-setup.sh`` installs both); skipped otherwise. Set WORKBENCH_UPDATE_SCREENSHOT=1
(or run docs/make_placement_screenshot.sh) to also refresh docs/placement_board.png.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from .test_dashboard_page import CHROMIUM, NODE

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCRIPT = HERE / "place_board.mjs"

CELLS = [
    # a cluster of its own, like a user's notebook: loopback only, any free dashboard port
    "import logging\n"
    "from distributed import Client, LocalCluster\n"
    "import workbench as wb\n"
    "from workbench.algorithms import ppo\n"
    "cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host='127.0.0.1',\n"
    "                       dashboard_address='127.0.0.1:0', silence_logs=logging.ERROR)\n"
    "client = Client(cluster)",
    "fdg = ppo.build_fdg()\nboard = wb.placement(fdg, client, steps=ppo.cfg.num_steps)\nboard",
    "# the kernel's view of the board\n"
    "import json\n"
    "checks = globals().get('checks', 0) + 1\n"
    "assert fdg.placement == board.policy\n"
    "print(f'BOARD {checks}:', json.dumps(json.loads(board.to_json())))",
]

#: JupyterLab settings for an unattended session: start the notebook's kernel without asking,
#: fetch no news
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(base: str, server: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"jupyter lab did not answer within {seconds:g} s:\n{log.read_text()[-3000:]}")


def _shut_down_kernels(base: str) -> None:
    """Ask the server to shut each kernel down (the notebook's cluster closes with it)."""
    try:
        with urllib.request.urlopen(f"{base}/api/kernels", timeout=5) as resp:
            kernels = json.load(resp)
        for kernel in kernels:
            req = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}", method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()
    except OSError:
        pass


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on a free loopback port serving a notebook that shows the board."""
    from .lab import jupyterlab as serve  # (lab.py imports this module's helpers)

    with serve(tmp_path, "board.ipynb", CELLS) as (url, log):
        yield url.split("/lab/")[0], log


def test_drag_a_fragment_onto_a_worker_in_jupyterlab(jupyterlab, tmp_path):
    base, log = jupyterlab
    board_png, page_png = tmp_path / "placement_board.png", tmp_path / "page.png"
    cmd = [NODE, str(SCRIPT), f"{base}/lab/tree/board.ipynb?reset", str(board_png), str(page_png), "90000"]
    proc = subprocess.run(
        cmd, cwd=HERE, capture_output=True, text=True, timeout=240, env={**os.environ, "CHROMIUM": CHROMIUM}
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"node printed no result (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    result = json.loads(lines[-1])
    assert "error" not in result, f"{result['error']}\nscreenshot: {page_png}\n{log.read_text()[-2000:]}"

    def learner(policy):
        return next(g for g in policy["groups"] if "learner" in g["fragments"])

    # the kernel's board started from Coarse, the learner on worker 0 …
    assert result["before"]["name"] == "SingleLearnerCoarse" and learner(result["before"])["workers"] == ["0"]
    # … and after the drag (in the page) the kernel's policy has it alone on worker 1's CPU
    after = result["after"]
    assert learner(after) == {"fragments": ["learner"], "replicas": 1, "workers": ["1"], "device": "cpu"}
    assert after["name"] == "custom" and result["message"] == "✓ learner → 1 (cpu)"
    # the malformed import was refused on the board with the reason, and changed nothing
    assert result["refusal"].startswith("Refused: policy JSON is malformed")
    # the Pipelined preset, picked after: its label says the actors lag the learner
    assert result["pipelined"] == 'policy "Pipelined" · pipelined, lag 1'
    assert board_png.exists() and board_png.stat().st_size > 10_000
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOT"):
        shutil.copyfile(board_png, REPO / "docs" / "placement_board.png")
    assert result["drag"] == "mouse", "the HTML5 drag needed dispatched events"  # a real mouse drag
    assert result["page_errors"] == [], result["page_errors"]
    assert result["external_requests"] == [], result["external_requests"]
