"""Changing a training run while it trains, in a real JupyterLab driven by headless chromium.

The quickstart trains in the background (coarse, on the embedded cluster) with its live
view; the browser re-runs the learner cell with one more ``wb.log``, then sets a new
learning rate and sends it with ``%fdg update cfg``, each cell saying from which iteration
it applies; a cell stops the run and shows where the changes landed, and a last one prints
what the run logged for the test to check. The page's picture is
docs/change_while_training.png (refreshed with WORKBENCH_UPDATE_SCREENSHOT=1, or
docs/make_change_screenshot.sh).

Needs Debian's chromium and playwright-core (``.ci/browser-setup.sh``); skipped otherwise.
"""

from __future__ import annotations

import math
import os
import re
import shutil

from .lab import REPO, drive, jupyterlab, quickstart_cells

NEW_LR = 1e-3
LOGS = "runs/quickstart"  # the run's metrics CSV, under the notebook's folder


def _cells() -> list[str]:
    learner = next(c for c in quickstart_cells() if c.startswith("%%fragment learner\n"))
    return quickstart_cells() + [
        f"# train in the background (the live view keeps updating) until stopped\n"
        f"cfg.iterations = 100_000  # the learning rate's annealing horizon\n"
        f"%fdg run --background --policy coarse --iterations 100000 --steps {{cfg.num_steps}} --log-dir {LOGS}",
        learner.rstrip("\n") + '\nwb.log("edited", 1.0)',
        f"cfg.learning_rate = {NEW_LR}\n%fdg update cfg",
        "# stop it: where the changes landed, and the metrics there\n"
        "run = %fdg stop\n"
        "for e in run.events:\n"
        "    print(f'{e.kind}: {e.message}')\n"
        "landed = {e.kind: e.iteration for e in run.events}\n"
        "run.metrics.loc[[landed['edited'] - 1, landed['edited'], landed['updated'] - 1, landed['updated']],\n"
        "                ['edited', 'charts/learning_rate', 'charts/mean_return_last_20']]",
        "# for the test\n"
        "import json\n"
        "m = run.metrics\n"
        "print('CHECK', json.dumps({'status': run.status, 'landed': landed, 'iterations': len(m),\n"
        "    'edited': [v == 1.0 for v in m['edited']],\n"
        "    'lr': [lr / (1 - i / cfg.iterations) for i, lr in zip(m.index, m['charts/learning_rate'])]}))",
    ]


def test_edit_and_update_a_background_run_in_jupyterlab(tmp_path):
    shot = tmp_path / "change_while_training.png"
    with jupyterlab(tmp_path, "quickstart.ipynb", _cells()) as (url, log):
        csv = tmp_path / "lab" / LOGS / "metrics.csv"
        result = drive("hot_edit.mjs", url, str(csv), str(shot), "120000", timeout=1500)
    assert "error" not in result, f"{result['error']}\nscreenshot: {shot}\n{log.read_text()[-2000:]}"

    # each change said at once, in its own cell, from which iteration it applies
    said_edit = re.search(r"learner: new iteration cell, applies from iteration (\d+)", result["edit_notice"])
    said_update = re.search(r"new value of cfg, applies from iteration (\d+)", result["update_notice"])
    assert said_edit and said_update, (result["edit_notice"], result["update_notice"])

    check = result["check"]
    assert check["status"] == "stopped", check
    edited, updated = check["landed"]["edited"], check["landed"]["updated"]
    assert int(said_edit.group(1)) <= edited < updated and int(said_update.group(1)) <= updated
    # the new cell's metric from its landing on, never before
    assert check["edited"] == [i >= edited for i in range(check["iterations"])], check["edited"]
    # the learning rate the learner used changed at the update's landing (annealing went on)
    want = [3e-3 if i < updated else NEW_LR for i in range(check["iterations"])]
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(check["lr"], want)), check["lr"]

    assert result["page_errors"] == [], result["page_errors"]
    assert result["external_requests"] == [], result["external_requests"]
    assert shot.stat().st_size > 50_000
    if os.environ.get("WORKBENCH_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, REPO / "docs" / "change_while_training.png")
