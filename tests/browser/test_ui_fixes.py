"""What a real-browser check of the quickstart notebook found (issue 57, item 5), each fix
checked in a real JupyterLab driven by headless chromium (``ui_fixes_lab.mjs``): one
session runs the quickstart's cells, draws the FDG, trains in the background without
``--steps``, stops, shows the placement board and restarts the kernel under it; each test
below asserts one fix on what the page showed. (The dashboard page's fix is in
``test_ui_fixes_dashboard.py``.)

Needs Debian's chromium and playwright-core (``.ci/browser-setup.sh``); skipped otherwise.
(No docs picture comes from here: ``docs/make_placement_screenshot.sh`` and
``docs/make_change_screenshot.sh`` make those.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from workbench.config import DEFAULT_STEPS

from .lab import drive, jupyterlab, quickstart_cells

CELLS = quickstart_cells() + [
    "%fdg  # the graph",
    "# background: no --steps\n"
    "bg = %fdg run --background --policy coarse --iterations 100000\n"
    "print('HANDLE', type(bg).__name__, bg.status)",
    "# live handle: the record fills in while it trains\n"
    "import time\n"
    "seen = bg.completed_iterations\n"
    "time.sleep(3)\n"
    "print('LIVE', seen, bg.completed_iterations, bg.status)",
    "# stop\nrun = %fdg stop\nprint('SAME', run is bg, run.status)",
    "%fdg place",
    "# diagnose: run only when the page shows no progress\n"
    "import sys, traceback\n"
    "print('DIAGNOSIS', bg.status, bg.completed_iterations, repr(bg.error))\n"
    "if bg.error is not None:\n"
    "    print(''.join(traceback.format_exception(bg.error)))\n"
    "for ident, frame in sys._current_frames().items():\n"
    "    print(f'--- thread {ident}', ''.join(traceback.format_stack(frame)[-8:]), sep='\\n')",
]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """What the browser found in one session (see the module's doc)."""
    tmp = tmp_path_factory.mktemp("ui_fixes")
    with jupyterlab(tmp, "quickstart.ipynb", CELLS) as (url, log):
        result = drive("ui_fixes_lab.mjs", url, str(tmp / "page.png"), str(tmp / "board.png"), "120000", timeout=1500)
    (tmp / "result.json").write_text(json.dumps(result, indent=1))  # for whoever reads a failure
    assert "error" not in result, f"{result['error']}\nscreenshot: {tmp / 'page.png'}\n{log.read_text()[-3000:]}"
    return result


def test_a_background_run_returns_its_live_record(page):
    """4: ``bg = %fdg run --background`` holds the Run, which trains on; ``%fdg stop``
    returns that same object."""
    assert page["handle"] == "HANDLE Run running", page["handle"]
    _, seen, later, status = page["live"].split()
    assert int(later) > int(seen) and status == "running", page["live"]
    assert page["same"] == "SAME True stopped", page["same"]


def test_a_kernel_restart_leaves_the_board_saying_so_with_dragging_off(page):
    """2: after a restart the old board says it is not connected, does not claim a live
    cluster, and takes no drag (nor raises 'Cannot send' in the page)."""
    before, after, dragged = page["board_before"], page["board_after"], page["drag_after"]
    assert not before["gone"] and all(before["draggable"]) and "live from the scheduler" in before["cluster"]
    assert after["gone"] and after["status"].startswith("Not connected: the kernel restarted."), after
    assert "live from the scheduler" not in after["cluster"] and "as last seen" in after["cluster"], after
    assert after["draggable"] and not any(after["draggable"]) and after["presets_disabled"], after
    assert dragged["policy"] == after["policy"] and dragged["message"] == after["message"], dragged
    assert page["page_errors"] == [], page["page_errors"]


def test_a_run_without_steps_says_the_default(page):
    """7: one line, where the run starts."""
    assert page["steps_notice"] == f"steps: the default, {DEFAULT_STEPS} per iteration (--steps T runs another)"


def test_the_progress_label_stays_beside_the_bar(page):
    """3: the label's top is the bar's, on one line, wide or narrow; narrow, it is cut
    with an ellipsis and its whole text is its tooltip."""
    for progress in (page["progress"], page["progress_narrow"]):
        assert abs(progress["label_top"] - progress["bar_top"]) <= 1, progress
        assert progress["label_left"] >= progress["bar_right"] - 1, progress
        assert progress["bar_top"] - 1 <= progress["text_top"] < progress["text_bottom"] <= progress["bar_bottom"] + 1
        assert progress["label_height"] < 1.6 * progress["line_height"], progress
        assert progress["white_space"] == "nowrap" and progress["text_overflow"] == "ellipsis"
    assert page["progress"]["text"].startswith("SingleLearnerCoarse · ")
    narrow = page["progress_narrow"]
    assert narrow["truncated"] and narrow["title"] == narrow["text"], narrow


def test_long_notices_wrap_at_word_boundaries(page):
    """6: the board's refusal in a narrow board, and the run's printed notices in a narrow
    notebook: no word broken across lines, and the long path or URL among them still fits."""
    notice, (started, link) = page["notice"], page["printed"]
    assert "node-0042.internal" in notice["text"] and notice["lines"] > 2, notice
    assert started["lines"] > 4 and "dashboard: http://127.0.0.1:" in link["text"], (started, link)
    for said in (notice, started, link):
        assert said["broken"] == [], said
        assert said["fits"], said
        assert (said["word_break"], said["overflow_wrap"]) == ("normal", "anywhere"), said


def test_the_graph_keeps_labels_clear_of_arrows_and_text_in_boxes(page):
    """5: no arrow passes through an edge label, and each fragment's texts (the actor's
    three rates) fit inside its box."""
    graph = page["graph"]
    assert {b["name"] for b in graph["boxes"]} == {"actor", "env", "learner"}
    assert all(b["spills"] == [] for b in graph["boxes"]), graph["boxes"]
    assert graph["arrows"] >= 5 and len(graph["labels"]) == graph["arrows"]
    assert graph["crossings"] == [], graph["crossings"]


def test_the_cli_says_the_default_steps(tmp_path):
    """7: ``workbench run`` of a notebook whose run line gives no --steps says the default."""
    import nbformat

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(c)
            for c in (
                "%load_ext workbench",
                "%%fragment counter --init\nn = 0",
                "%%fragment counter\nn = n + 1",
                "%fdg run --iterations 1",
            )
        ]
    )
    nbformat.write(nb, tmp_path / "tiny.ipynb")
    cli = "import sys\nfrom workbench.cli import console_main\nsys.exit(console_main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", cli, "run", str(tmp_path / "tiny.ipynb"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stdout.splitlines() if re.search(r"steps: the default", line)]
    assert said == [f"workbench: steps: the default, {DEFAULT_STEPS} per iteration (--steps T runs another)"], (
        out.stdout
    )
