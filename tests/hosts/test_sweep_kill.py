"""A sweep on user-started workers loses no trial to a killed worker host.

On namespace hosts (``tests/hosts/conftest.py``: a ``dask scheduler`` on h0, ``dask worker
--nthreads 1`` on h1 and h2, as a user starts them), the driver below — run on h0 like a
notebook — sweeps 10 seeds of the quickstart to solve, checkpointing every 5 iterations to
a folder both hosts see. Once a trial on w2 is past iteration 12, w2's host is killed
whole (its nanny with it: nothing comes back). Every trial still solves; a trial that was
on w2 goes on on w1 from its newest checkpoint — none starts over from iteration 0 — and
the table says where it resumed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 10
KILL_AFTER = 12


def test_a_sweep_loses_no_trial_when_a_worker_host_is_killed(host_cluster, tmp_path):
    spec = {
        "scheduler": host_cluster.address,
        "checkpoint_dir": str(tmp_path / "sweep"),
        "victim": "w2",
        "pgid": host_cluster.procs[2].pid,
        "seeds": SEEDS,
    }
    done = host_cluster.net.run(
        0, [sys.executable, "-m", "tests.hosts.test_sweep_kill", json.dumps(spec)], timeout=900, cwd=str(ROOT)
    )
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}\n{host_cluster.logs()}"
    result = json.loads(line[len("RESULT ") :])
    print(result["table"])  # the kill run's table, for the record (pytest -s)
    assert result["killed"], result
    assert result["statuses"] == ["solved"] * SEEDS, result["table"]
    resumed = {int(t): at for t, at in result["resumed_from"].items() if at}
    assert resumed, result["table"]  # the trial the kill hit went on elsewhere …
    assert all(a > 0 for ats in resumed.values() for a in ats), result["table"]  # … from a checkpoint, not from 0
    assert all(result["workers"][str(t)] == "w1" for t in resumed), result
    assert "resumed from iteration" in result["table"] and "(w2 lost)" in result["table"]


def drive(spec: dict) -> dict:
    """On h0: the quickstart's 10 seeds as a sweep on the hosts' workers, w2's host killed mid-sweep."""
    from distributed import Client

    from workbench.notebook import load_notebook
    from workbench.sweep import sweep

    killed: dict = {}

    class KillMidSweep:  # the live view's place: it sees every event as the table takes it
        def __init__(self, table) -> None:
            pass

        def update(self, table) -> None:
            on_victim = [r for r in table.running() if r.worker == spec["victim"] and r.done > KILL_AFTER]
            if on_victim and not killed:
                killed.update(trial=on_victim[0].trial.index, at=on_victim[0].done)
                os.killpg(spec["pgid"], signal.SIGKILL)

        def close(self, table) -> None:
            pass

    client = Client(spec["scheduler"], timeout=120, set_as_default=False)
    client.wait_for_workers(2, timeout=180)  # both hosts' workers, as a user waits for them
    fdg, options = load_notebook(ROOT / "notebooks" / "quickstart.ipynb")
    result = sweep(
        fdg,
        seeds=spec["seeds"],
        cluster=client,
        checkpoint_dir=spec["checkpoint_dir"],
        checkpoint_every=5,
        progress=KillMidSweep,
        **options,
    )
    client.close()
    rows = result.trials.rows
    return {
        "killed": killed,
        "statuses": [r.status for r in rows],
        "table": result.trials.text(),
        "resumed_from": {r.trial.index: r.resumed_from for r in rows},
        "workers": {r.trial.index: r.worker for r in rows},
        "summary": result.summary(),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(drive(json.loads(sys.argv[1]))), flush=True)
