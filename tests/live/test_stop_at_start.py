"""A stop asked for while a run is still starting (docs/live_changes.md, "Stop it"): it is
honoured before anything deploys — the run returns stopped, with no iteration run — under
inline and on a cluster, from the Python API and from ``%fdg stop`` right after
``%fdg run --background``. Before, such a stop was dropped and the run trained all its
iterations (``%fdg stop`` waited for all of them). And a change asked for after a
boundary was decided lands there, as its notice says, never before it."""

from __future__ import annotations

import re
import threading

import pytest

from tests.live.test_live_changes import At, counting_fdg
from workbench.session import FDG
from workbench.trainer import Trainer

ITERATIONS = 200


def _deploys(monkeypatch) -> list[str]:
    """The backends that deployed replicas in this test."""
    from workbench.cluster.backend import DaskBackend
    from workbench.runtime.engine.inline import InlineBackend

    deployed: list[str] = []
    for cls in (InlineBackend, DaskBackend):
        original = cls.deploy

        def deploy(self, *args, _original=original, **kwargs):
            deployed.append(type(self).__name__)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "deploy", deploy)
    return deployed


def _stopped_before_anything(run, deployed) -> None:
    assert run.status == "stopped" and run.error is None
    assert run.completed_iterations == 0 and run.rows == [] and deployed == []


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_stop_while_the_run_is_being_checked_is_honoured_before_deploying(policy, client, monkeypatch):
    """The stop comes while ``run()`` checks the FDG, before the run has its trainer."""
    fdg = counting_fdg()
    original = Trainer.prepare

    def prepare(self):
        fdg.stop()  # as %fdg stop right after %fdg run --background does
        return original(self)

    monkeypatch.setattr(Trainer, "prepare", prepare)
    deployed = _deploys(monkeypatch)
    run = fdg.run(
        iterations=ITERATIONS, steps=3, policy=policy, progress=False, cluster=None if policy == "inline" else client
    )
    _stopped_before_anything(run, deployed)
    assert fdg.last_run is run and not fdg.running


def test_a_stop_while_the_run_connects_to_its_cluster_is_honoured_before_deploying(client, monkeypatch):
    import workbench.cluster.connect as connect_module

    fdg = counting_fdg()
    original = connect_module.connect

    def connect(*args, **kwargs):
        fdg.stop()
        return original(*args, **kwargs)

    monkeypatch.setattr(connect_module, "connect", connect)
    deployed = _deploys(monkeypatch)
    run = fdg.run(iterations=ITERATIONS, steps=3, policy="coarse", cluster=client, progress=False)
    _stopped_before_anything(run, deployed)


def test_a_stop_with_nothing_running_stops_nothing_later():
    fdg = counting_fdg()
    fdg.stop()
    run = fdg.run(iterations=3, steps=2, progress=False)
    assert run.status == "finished" and run.completed_iterations == 3


def test_fdg_stop_right_after_a_background_run_is_started(ip, monkeypatch):
    """``%fdg stop`` before the background thread has even called ``fdg.run``: the stop is
    asked again until the run takes it; the run ends stopped, far short of its iterations."""
    for cell in (
        "import time",
        "%%fragment env --init\nobs = np.zeros(2)\n",
        "%%fragment actor\naction = obs + 1\n",
        "%%fragment env\nobs = action * 0.5\nreward = action.copy()\n",
        "%%fragment learner\ntime.sleep(0.01)\nwb.log('T', reward.shape[0])\n",
    ):
        assert ip.run_cell(cell).success
    fdg = ip.magics_manager.registry["WorkbenchMagics"].fdg
    gate, asked = threading.Event(), []
    run_, stop_ = FDG.run, FDG.stop

    def run(self, *args, **kwargs):  # the thread starts, and waits for the first stop
        assert gate.wait(60)
        return run_(self, *args, **kwargs)

    def stop(self):
        asked.append(self.running)
        stop_(self)
        gate.set()

    monkeypatch.setattr(FDG, "run", run)
    monkeypatch.setattr(FDG, "stop", stop)
    ip.run_line_magic("fdg", f"run --background --iterations {ITERATIONS * 50} --steps 2 --no-progress")
    result = ip.run_line_magic("fdg", "stop")
    assert asked[0] is False and len(asked) >= 2  # the first found no run; asked again
    assert result is fdg.last_run and result.status == "stopped" and result.error is None
    assert result.completed_iterations < ITERATIONS * 50


def test_a_change_made_once_the_boundary_is_decided_lands_there_as_announced(capsys):
    """An update decides the boundary; an edit made while that row is recorded is swept
    into the same boundary: its notice says that iteration, not one past it (the change
    landed a boundary earlier than announced). Lockstep (a target) makes the boundary the
    one right after the deciding row."""
    fdg = counting_fdg()
    edited = "updates += 1\ntotal += float(reward.sum())\ngain = 1.0 + total % 3\nwb.log('edited', 1.0)"
    update = At(2, lambda: fdg.update(scale=2.0))
    edit = At(3, lambda: fdg.add_fragment("learner", edited, rate="iteration"))
    run = fdg.run(iterations=12, steps=3, progress=False, loggers=[update, edit], target_return=1e9)
    assert run.status == "finished", run.error
    out = capsys.readouterr().out
    announced = {
        what: int(at)
        for what, at in re.findall(
            r"workbench: (new value of scale|learner: new iteration cell), applies from "
            r"iteration (\d+) at the earliest",
            out,
        )
    }
    landed = {e.kind: e.iteration for e in run.events}
    assert update.result == announced["new value of scale"] <= landed["updated"]
    assert announced["learner: new iteration cell"] <= landed["edited"]
    metrics = run.metrics
    assert metrics.loc[: landed["edited"] - 1, "edited"].isna().all()
    assert (metrics.loc[landed["edited"] :, "edited"] == 1.0).all()
