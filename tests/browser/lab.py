"""A JupyterLab server for browser tests: one notebook, loopback only, no token, its kernel
started before the page opens; and running a playwright driver script against it.

(The placement board's test has its own copy of the same server setup.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from tests.live.kernel import quickstart_cells  # noqa: F401  (the tests here use it from this module)

from .test_dashboard_page import CHROMIUM, NODE, _require_browser
from .test_placement_board import SETTINGS, _free_port, _shut_down_kernels, _wait_for_server

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _start_session(base: str, name: str) -> None:
    """Start the notebook's kernel before the page opens: the page then attaches to it."""
    import urllib.request

    body = json.dumps({"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}).encode()
    req = urllib.request.Request(
        f"{base}/api/sessions", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=60).close()


@contextmanager
def jupyterlab(tmp_path: Path, name: str, cells: list[str]):
    """Serve a notebook ``name`` of ``cells``; yields (its page URL, the server log)."""
    _require_browser()
    root = tmp_path / "lab"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / name)
    settings = tmp_path / "settings"
    for key, value in SETTINGS.items():
        (settings / key).parent.mkdir(parents=True, exist_ok=True)
        (settings / key).write_text(json.dumps(value))
    port = _free_port()
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "PYTHONPATH": str(REPO),
    }
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--port-retries",
        "0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
        f"--LabApp.user_settings_dir={settings}",
    ]
    with open(log, "w") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, server, log)
        _start_session(base, name)
        yield f"{base}/lab/tree/{name}?reset", log
    finally:
        _shut_down_kernels(base)  # a clean kernel exit closes its embedded cluster
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def drive(script: str, *args: str, timeout: float = 600) -> dict:
    """Run ``node SCRIPT ARGS…`` (a playwright-core driver); return the JSON it printed last."""
    proc = subprocess.run(
        [NODE, str(HERE / script), *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        pytest.fail(f"node printed no result (rc {proc.returncode}): {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])
