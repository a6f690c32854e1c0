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
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from .test_dashboard_page import CHROMIUM, NODE, _require_browser

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
    "fdg = ppo.build_fdg()\n"
    "board = wb.placement(fdg, client, steps=ppo.cfg.num_steps)\n"
    "board",
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


def _start_session(base: str) -> None:
    """Start the notebook's kernel before the page opens: the page then attaches to it,
    instead of racing its own kernel start against the first clicks."""
    body = json.dumps({"path": "board.ipynb", "name": "board.ipynb", "type": "notebook",
                       "kernel": {"name": "python3"}}).encode()
    req = urllib.request.Request(f"{base}/api/sessions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).close()


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
    _require_browser()
    root = tmp_path / "lab"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "board.ipynb")
    settings = tmp_path / "settings"
    for name, value in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    port = _free_port()
    log = tmp_path / "server.log"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
           "--port", str(port), "--port-retries", "0", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True",  # the REST calls below; no auth on this loopback server anyway
           f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
           f"--LabApp.user_settings_dir={settings}"]
    with open(log, "w") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root,
                                  start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, server, log)
        _start_session(base)
        yield base, log
    finally:
        _shut_down_kernels(base)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_drag_a_fragment_onto_a_worker_in_jupyterlab(jupyterlab, tmp_path):
    base, log = jupyterlab
    board_png, page_png = tmp_path / "placement_board.png", tmp_path / "page.png"
    cmd = [NODE, str(SCRIPT), f"{base}/lab/tree/board.ipynb?reset", str(board_png), str(page_png), "90000"]
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "CHROMIUM": CHROMIUM})
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
    assert board_png.exists() and board_png.stat().st_size > 10_000
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOT"):
        shutil.copyfile(board_png, REPO / "docs" / "placement_board.png")
    assert result["drag"] == "mouse", "the HTML5 drag needed dispatched events"  # a real mouse drag
    assert result["page_errors"] == [], result["page_errors"]
    assert result["external_requests"] == [], result["external_requests"]
