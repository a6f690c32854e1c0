"""``%fdg sweep`` in a real InteractiveShell: in the foreground it returns the result; with
``--background`` the notebook stays usable and ``%fdg stop`` stops it, keeping what finished."""

from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError


def _cells(ip) -> None:
    ip.run_cell("import time\ncfg = {'seed': 1, 'lr': 0.1, 'sleep': 0.02}")
    ip.run_cell_magic("fragment", "env --init", "tick = 0")
    ip.run_cell_magic("fragment", "env", "time.sleep(cfg['sleep'])\ntick = tick + 1")
    ip.run_cell_magic("fragment", "learner --init", "level = 0.0")
    ip.run_cell_magic("fragment", "learner", "level += cfg['lr']\nwb.log('charts/episodic_return', level)")


def test_fdg_sweep_returns_the_result_and_background_sweeps_stop_with_fdg_stop(ip, client):
    _cells(ip)
    address = client.scheduler.address
    result = ip.run_line_magic(
        "fdg", f"sweep --seeds 2 --set cfg.lr=1.0,2.0 --iterations 3 --steps 1 --cluster {address}"
    )
    assert list(result.table["status"]) == ["finished"] * 4
    assert list(result.table["mean_return"]) == pytest.approx([2.0, 4.0, 2.0, 4.0])

    ip.run_line_magic("fdg", f"sweep --background --seeds 8 --iterations 200 --steps 1 --cluster {address}")
    assert ip.run_cell("x = 1 + 1").success  # the notebook stays usable meanwhile
    time.sleep(6)  # trials of ≥ 4 s each, 2 at a time: the stop lands mid-sweep
    stopped = ip.run_line_magic("fdg", "stop")
    statuses = list(stopped.table["status"])
    assert stopped.interrupted and "not run" in statuses, statuses
    assert set(statuses) <= {"finished", "stopped", "not run"}, statuses
    with pytest.raises(UsageError, match="seeds"):
        ip.run_line_magic("fdg", "sweep --seeds 0")
