"""The workbench dashboard page shows a run changed while it trains as one run (issue 57,
item 5.1), in a real headless chromium.

A slow toy run on a 2-worker LocalCluster is re-placed from coarse to multilearner (other
groups) at an iteration boundary; the page then lists one run in its Run menu, and its
header gives the run record's iterations and env steps, and where it changed.

Needs Debian's chromium and playwright-core (``.ci/browser-setup.sh``); skipped otherwise.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from .lab import drive
from .test_dashboard_page import _require_browser, _slow_fdg

ITERATIONS = 30
REPLACE_AFTER = 8


@pytest.mark.filterwarnings("ignore::workbench.fdg.plan.IndependentLearnersWarning")  # a toy learner
def test_a_re_placed_run_is_one_run_with_its_records_totals(tmp_path):
    _require_browser()
    from distributed import Client, LocalCluster

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
            fdg = _slow_fdg("env")
            done: dict = {}
            trainer = threading.Thread(
                target=lambda: done.update(
                    run=fdg.run(iterations=ITERATIONS, steps=5, policy="coarse", cluster=client, progress=False)
                )
            )
            trainer.start()
            deadline = time.monotonic() + 120
            while (fdg.last_run is None or fdg.last_run.completed_iterations < REPLACE_AFTER) and trainer.is_alive():
                assert time.monotonic() < deadline, "the run did not reach the re-placement"
                time.sleep(0.05)
            fdg.replace("multilearner")
            trainer.join(timeout=300)
            run = done["run"]
            assert run.status == "finished", run.error
            changed = next(e.iteration for e in run.events if e.kind == "replaced")
            base = client.dashboard_link.rsplit("/", 1)[0]
            want = f"{run.env_steps:,} env steps"
            result = drive("ui_fixes_dashboard.mjs", f"{base}/workbench", str(tmp_path / "page.png"), "90000", want)
    assert "error" not in result, result["error"]
    assert result["page_errors"] == [] and result["console_errors"] == [], result
    # one run in the menu, not one per stretch
    assert len(result["runs"]) == 1, result["runs"]
    header = result["header"]
    # the record's totals: every env step and every iteration, over both placements
    assert want in header, header
    assert f"{run.completed_iterations} iterations" in header, header
    assert f"changed while training at iteration {changed}" in header, header
    # the replicas it runs now: multilearner fuses env and learner
    assert "groups: env+learner" in header, header
