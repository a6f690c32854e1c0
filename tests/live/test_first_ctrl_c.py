"""Kernel ▸ Interrupt on a foreground run, from a real Jupyter kernel: the first Ctrl-C stops
the run at its next iteration boundary and keeps what it trained — the run's state (so
``r.checkpoint(path)`` works) and the checkpoint promised at the end — as ``%fdg stop``
does for a background run (``workbench.runtime.process.interrupts.first_interrupt_stops``).

Before 2026-12-01 it interrupted at once: the cell's result had no state and the
checkpoint directory held only the every-N ones (none at all before the first N).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .kernel import quickstart_cells
from .test_real_kernel import SMALL


def _rows(log_dir: Path) -> int:
    """Iterations the run has logged (its CSV, which the logger writes row by row)."""
    files = list(log_dir.rglob("*.csv"))
    return max((len(f.read_text().splitlines()) - 1 for f in files), default=0)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_the_first_interrupt_stops_at_a_boundary_keeping_the_state_and_the_final_checkpoint(kernel, policy, tmp_path):
    kernel.ok("%fdg reset")
    for cell in quickstart_cells():
        kernel.ok(cell)
    kernel.ok(SMALL)
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"
    running = kernel.send(
        f"r = %fdg run --iterations 100000 --policy {policy} --checkpoint-dir {ckpt} "
        f"--checkpoint-every 100000 --log-dir {logs} --no-progress"
    )
    deadline = time.monotonic() + 300  # the embedded cluster may take a while to start
    while _rows(logs) < 3:
        assert time.monotonic() < deadline, "the run logged no 3 iterations within 300 s"
        time.sleep(0.1)
    kernel.interrupt()
    reply = kernel.collect(running, timeout=300)
    assert reply.status == "ok", reply.text[-3000:]  # the cell returns the run, no traceback
    assert "stopping at the end of this iteration" in reply.text and "Traceback" not in reply.text
    status, iterations, has_state, latest = kernel.value(
        f"[r.status, r.completed_iterations, r.state is not None, open({str(ckpt / 'LATEST')!r}).read().strip()]"
    )
    assert status == "interrupted" and iterations >= 3 and has_state
    assert latest == f"iteration-{iterations:06d}"  # the final checkpoint, at the boundary it stopped at
    saved = tmp_path / "saved"
    kernel.ok(f"r.checkpoint({str(saved)!r})")
    assert (saved / "LATEST").exists()
