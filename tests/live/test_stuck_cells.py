"""A cell that never returns cannot wedge the session: a stop returns within a bounded
time, names the cell, leaves nothing running, and the next run works at once."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.driver import STOP_GRACE_S

STUCK_STEP = """\
seen += 1
if seen > 6 and stuck:
    while not os.path.exists(release):   # does not return (until the test ends)
        time.sleep(0.05)
obs = obs + 1
reward = obs.copy()
"""


def sticky_fdg(release: str) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "time": time, "os": os, "stuck": True, "release": release})
    fdg.add_fragment("env", "obs = np.zeros(2)\nseen = 0", rate="init")
    fdg.add_fragment("env", STUCK_STEP, rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "total += float(reward.sum())", rate="iteration")
    return fdg


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_stop_returns_with_a_stuck_cell_named_and_the_fdg_runs_again(policy, client, capsys, tmp_path):
    release = tmp_path / "release"
    try:
        _stop_a_stuck_run(policy, client, capsys, str(release))
    finally:
        release.write_text("")  # an abandoned thread ends now: no thread outlives the test
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(t.name.startswith("workbench-") for t in threading.enumerate()):
            time.sleep(0.1)


def _stop_a_stuck_run(policy, client, capsys, release: str) -> None:
    fdg = sticky_fdg(release)
    result = {}
    thread = threading.Thread(target=lambda: result.update(run=fdg.run(
        iterations=1000, steps=3, policy=policy, cluster=client, progress=False)), daemon=True)
    thread.start()
    time.sleep(3)  # by now the env's step cell is stuck in iteration 2
    asked = time.monotonic()
    fdg.stop()
    thread.join(timeout=3 * STOP_GRACE_S + 60)  # the grace, the loops' grace, a worker restart
    assert not thread.is_alive(), "stop did not return"
    assert time.monotonic() - asked < 3 * STOP_GRACE_S + 60
    run = result["run"]
    assert run.status == "stopped" and not fdg.running
    out = capsys.readouterr().out
    assert "the env step cell (replica 0" in out and "has not returned" in out
    # the FDG and the cluster are usable at once
    fdg.namespace["stuck"] = False
    again = fdg.run(iterations=3, steps=3, policy=policy, cluster=client, progress=False)
    assert again.status == "finished" and again.completed_iterations == 3
