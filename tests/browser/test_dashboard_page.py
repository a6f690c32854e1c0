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
        pytest.skip(
            "playwright-core is not installed in tests/browser: run .ci/browser-setup.sh (npm ci in tests/browser)"
        )


@pytest.fixture(scope="module")
def dashboard():
    """A LocalCluster on loopback (free ports) whose dashboard serves the workbench page,
    after a short workbench run, so that the scheduler holds its events."""
    _require_browser()
    from distributed import Client, LocalCluster

    from workbench.cluster import dashboard as page
    from tests.conftest import toy_fdg

    assert page.install()  # before the cluster starts: Bokeh routes are fixed at startup
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
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
    proc = subprocess.run(
        cmd, cwd=HERE, capture_output=True, text=True, timeout=240, env={**os.environ, "CHROMIUM": CHROMIUM}
    )
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


SLOW_ITERATIONS = 60


def _slow_fdg(env: str):
    """A torch-free loop of ~0.1 s an iteration (long enough to watch), whose stepping
    fragment is called ``env`` (each run's groups tell the two runs apart in the table)."""
    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"np": np, "time": time})
    fdg.add_fragment(env, "obs = np.zeros(2)", rate="init")
    fdg.add_fragment(env, "time.sleep(0.02)\nobs = obs + 1\nreward = obs.copy()", rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "total += float(reward.sum())", rate="iteration")
    return fdg


def test_table_follows_the_run_and_then_the_next_run(tmp_path):
    """The page stays open (no reload) through two runs: the 'Groups, replicas and workers'
    table's last iterations advance with the run, and the second run's table shows its own
    groups, not the first run's."""
    _require_browser()
    from distributed import Client, LocalCluster

    from workbench.cluster import dashboard as page

    assert page.install()
    stop, shot = tmp_path / "stop", tmp_path / "table.png"
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            base = client.dashboard_link.rsplit("/", 1)[0]
            watcher = subprocess.Popen(
                [NODE, str(HERE / "watch_table.mjs"), f"{base}/workbench", str(stop), str(shot), "600000"],
                cwd=HERE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "CHROMIUM": CHROMIUM},
            )
            try:
                deadline = time.monotonic() + 120
                while not Path(f"{stop}.ready").exists():
                    assert watcher.poll() is None and time.monotonic() < deadline, "the page did not open"
                    time.sleep(0.2)
                for env in ("env", "sim"):
                    _slow_fdg(env).run(
                        iterations=SLOW_ITERATIONS, steps=5, policy="coarse", cluster=client, progress=False
                    )
                    time.sleep(3)  # a few polls of the page after the run's last report
                stop.touch()
                out, _ = watcher.communicate(timeout=120)
            finally:
                if watcher.poll() is None:
                    watcher.kill()
                    watcher.wait()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, f"node printed no result: {out[-2000:]}"
    result = json.loads(lines[-1])
    assert "error" not in result, result["error"]
    assert result["page_errors"] == [] and result["console_errors"] == [], result

    samples = [s for s in result["samples"] if s["run"]]
    runs = list(dict.fromkeys(s["run"] for s in samples))  # in the order the page showed them
    assert len(runs) == 2, f"the page showed runs {runs}"

    def table(s):  # (group, last iteration) per row
        return [(row[0], int(row[5])) for row in s["rows"] if row and row[5].isdigit()]

    first = [s for s in samples if s["run"] == runs[0]]
    seen = sorted({max(i for _, i in table(s)) for s in first if table(s)})
    assert len(seen) >= 3, f"the table's last iteration did not advance without a reload: {seen}"
    assert table(first[-1]) and {g for g, _ in table(first[-1])} == {"env", "learner"}, first[-1]
    assert all(i == SLOW_ITERATIONS - 1 for _, i in table(first[-1])), first[-1]

    second = [s for s in samples if s["run"] == runs[1]]
    since = second[0]["t"]
    # once the header shows the second run (a poll of grace for the table's redraw) …
    stale = [s for s in second if s["t"] > since + 1.0 and {g for g, _ in table(s)} != {"sim", "learner"}]
    assert not stale, f"the second run's table showed other rows: {stale[:2]}"
    assert all(i == SLOW_ITERATIONS - 1 for _, i in table(second[-1])), second[-1]


def test_a_run_without_episodes_shows_its_prog_bar_metrics(tmp_path):
    """GRPO ends no episodes: the page's header gives the newest value of each metric its
    cells log with prog_bar=True (from the workers' reports), in a real browser."""
    _require_browser()
    from distributed import Client, LocalCluster

    from tests.runtime.test_prog_bar import logging_loop
    from workbench.cluster import dashboard as page

    assert page.install()
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            logging_loop().run(iterations=30, steps=2, policy="coarse", cluster=client, progress=False)
            base = client.dashboard_link.rsplit("/", 1)[0]
            shot = tmp_path / "prog_bar.png"
            proc = subprocess.run(
                [
                    NODE,
                    str(SCRIPT),
                    f"{base}/workbench",
                    str(shot),
                    "90000",
                    "updates 30 · every_third 300 · actions_per_call 2",
                ],
                cwd=HERE,
                capture_output=True,
                text=True,
                timeout=240,
                env={**os.environ, "CHROMIUM": CHROMIUM},
            )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"node printed no result (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    result = json.loads(lines[-1])
    assert "error" not in result, result["error"]
    assert result["page_errors"] == [] and result["console_errors"] == [], result
    assert result["missing"] == [], f"not shown in the page: {result['missing']}"
