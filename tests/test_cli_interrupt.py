"""One Ctrl-C to ``workbench run`` stops the run at its next iteration boundary, writes the
final checkpoint and says where it is; the command exits 130 (docs/errors.md row 39)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.test_cli_and_notebooks import CLI_WITH_CTRL_C, QUICKSTART, wait_for_rows


def test_one_ctrl_c_stops_at_a_boundary_and_says_where_the_final_checkpoint_is(tmp_path):
    logs, ckpt = tmp_path / "logs", tmp_path / "ckpt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLI_WITH_CTRL_C,
            "run",
            str(QUICKSTART),
            "--policy",
            "inline",
            "--iterations",
            "100000",
            "--target-return",
            "1e9",
            "--no-progress",
            "--log-dir",
            str(logs),
            "--checkpoint-dir",
            str(ckpt),
            "--checkpoint-every",
            "100000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_rows(proc, logs / "metrics.csv")
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    latest = (ckpt / "LATEST").read_text().strip()
    iteration = int(latest.split("-")[1])
    assert f"workbench: stopped at iteration {iteration}; its final checkpoint is in {ckpt}" in err, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
