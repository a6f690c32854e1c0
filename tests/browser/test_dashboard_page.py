"""The workbench page on the Dask dashboard, in a real headless browser.

Needs Debian's chromium (/usr/bin/chromium) and playwright-core in tests/browser/node_modules
(``.ci/browser-setup.sh`` installs both); skipped otherwise. Set WORKBENCH_UPDATE_SCREENSHOT=1
to also refresh docs/dashboard.png.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NODE = shutil.which("node")
SCRIPT = HERE / "check_page.mjs"
FRAGMENTS = ("actor", "env", "learner")


def _require_browser() -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: run .ci/browser-setup.sh (apt-get install chromium)")
    if NODE is None:
        pytest.skip("node is not on PATH: install Node.js 18+ to run the browser tests")
    if not (HERE / "node_modules" / "playwright-core" / "package.json").exists():
        pytest.skip("playwright-core is not installed in tests/browser: run .ci/browser-setup.sh "
                    "(npm ci in tests/browser)")


@pytest.fixture(scope="module")
def dashboard():
    """A LocalCluster on loopback (free ports) whose dashboard serves the workbench page,
    after a short workbench run, so that the scheduler holds its events."""
    _require_browser()
    from distributed import Client, LocalCluster

    from workbench.cluster import dashboard as page
    from tests.conftest import toy_fdg

    assert page.install()  # before the cluster starts: Bokeh routes are fixed at startup
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as cluster:
        with Client(cluster, set_as_default=False) as client:
            run = toy_fdg().run(iterations=30, steps=4, policy="coarse", cluster=client, progress=False)
            base = client.dashboard_link.rsplit("/", 1)[0]
            yield base, run, client


def _get(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def test_page_is_listed_for_labextension(dashboard):
    base, _, _ = dashboard
    plots = json.loads(_get(f"{base}/individual-plots.json"))
    assert plots.get("Individual Workbench") == "/individual-workbench", plots
    # and in the dashboard's own "More..." menu
    assert 'href="individual-workbench"' in _get(f"{base}/status").replace("./", "")


@pytest.mark.parametrize("path", ["/workbench", "/individual-workbench"])
def test_page_loads_nothing_external(dashboard, path):
    base, _, _ = dashboard
    html = _get(base + path)
    # scripts, styles, images: all from the scheduler itself (BokehJS is served by it)
    loaded = re.findall(r"""<(?:script|img|link)\b[^>]*?\b(?:src|href)=["']([^"']+)""", html, flags=re.I)
    assert loaded, html[:500]
    external = [u for u in loaded if re.match(r"(?i)(https?:)?//", u) and "127.0.0.1" not in u]
    assert not external, external


def test_page_in_headless_chromium(dashboard, tmp_path):
    base, run, client = dashboard
    # events are logged by the workers' replica loops; wait until the scheduler holds the last one
    deadline = time.monotonic() + 60
    while not any(t.startswith("workbench-") for t in client.get_events()):
        assert time.monotonic() < deadline, "no workbench-* events reached the scheduler"
        time.sleep(0.2)
    shot = tmp_path / "dashboard.png"
    cmd = [NODE, str(SCRIPT), f"{base}/workbench", str(shot), "90000", *FRAGMENTS, "Groups, replicas and workers"]
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "CHROMIUM": CHROMIUM})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"node printed no result (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    result = json.loads(lines[-1])
    assert "error" not in result, result["error"]
    assert shot.exists()
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, REPO / "docs" / "dashboard.png")
    assert result["page_errors"] == [], result["page_errors"]
    assert result["console_errors"] == [], result["console_errors"]
    assert result["external_requests"] == [], result["external_requests"]
    assert result["missing"] == [], f"not shown in the page: {result['missing']}"
    assert result["ok"]
