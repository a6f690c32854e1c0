"""Kernel ▸ Interrupt during a coarse run, in a real JupyterLab driven by headless chromium.

The quickstart's cells run in the page; a foreground ``%fdg run --policy coarse`` trains on
the embedded cluster the kernel starts (its workers in their own process group); once the
run has written a few iterations to its metrics CSV the browser clicks Kernel ▸ Interrupt
Kernel. The cell returns with one line and the run so far, no traceback and no worker
death, and the next cell's coarse run works on the same kernel and the same worker
processes.

Needs Debian's chromium and playwright-core (``.ci/browser-setup.sh``); skipped otherwise.
"""

from __future__ import annotations

from .lab import drive, jupyterlab, quickstart_cells

#: generous for a busy 2-core CI machine; the measured time is printed (pytest -s / -rA)
RETURN_BOUND_S = 60.0
ROWS_BEFORE_INTERRUPT = 3


def _cells(csv: str) -> list[str]:
    return quickstart_cells() + [
        "cfg.num_envs = 4\ncfg.num_steps = 16",
        "# the embedded cluster's worker processes, to check after the interrupt\n"
        "import os\nfrom workbench.cluster.connect import embedded_cluster\n"
        "workers_before = embedded_cluster().client.run(os.getpid)",
        f"# the run to interrupt\nrun = %fdg run --policy coarse --iterations 100000 --steps 16 --log-dir {csv}",
        "# after the interrupt\n"
        "again = %fdg run --policy coarse --iterations 3 --steps 16 --no-progress\n"
        "import json\n"
        "print('AFTER', json.dumps({'status': run.status, 'done': run.completed_iterations,\n"
        "    'again': again.status, 'again_done': again.completed_iterations,\n"
        "    'same_workers': embedded_cluster().client.run(os.getpid) == workers_before}))",
    ]


def test_kernel_interrupt_stops_a_coarse_run_and_the_next_one_works(tmp_path):
    logs = tmp_path / "logs"
    shot = tmp_path / "interrupt.png"
    with jupyterlab(tmp_path, "interrupt.ipynb", _cells(str(logs))) as (url, log):
        result = drive(
            "interrupt.mjs",
            url,
            str(logs / "metrics.csv"),
            str(ROWS_BEFORE_INTERRUPT),
            str(shot),
            "120000",
            timeout=900,
        )
    assert "error" not in result, f"{result['error']}\nscreenshot: {shot}\n{log.read_text()[-2000:]}"
    print(
        f"Kernel ▸ Interrupt → cell returned in {result['returned_s']:.2f} s "
        f"(after {result['rows_at_interrupt']} iterations)"
    )
    assert result["returned_s"] < RETURN_BOUND_S, result

    # one interrupt line, the run so far as the result; nothing else said
    text = "\n".join(o["text"] for o in result["outputs"])
    assert text.count("workbench: interrupted after") == 1, text
    for noise in ("Traceback", "KeyboardInterrupt", "Worker process died", "Error", "Exception"):
        assert noise not in text, f"{noise!r} in the interrupted cell's output:\n{text}"
    assert not [o for o in result["outputs"] if "stderr" in o["mime"]], result["outputs"]

    # the next coarse run worked: same kernel (its names are there), same worker processes
    after = result["after"]
    assert after["status"] == "interrupted" and after["done"] >= ROWS_BEFORE_INTERRUPT, after
    assert after["again"] == "finished" and after["again_done"] == 3, after
    assert after["same_workers"], "the interrupt cost the embedded cluster its worker processes"
    assert result["page_errors"] == [], result["page_errors"]
    assert result["external_requests"] == [], result["external_requests"]
