"""Changing a running training: a re-run cell or a changed notebook value applies at the
next iteration boundary, under every policy, with every fragment's state kept."""

from __future__ import annotations

import time

import numpy as np
import pytest

import workbench as wb

ITERATIONS = 16
EDIT_AT = 2  # the change is made while iteration EDIT_AT is being recorded


LEARNER = "updates += 1\ntotal += float(reward.sum())\ngain = 1.0 + total % 3\nwb.log('learner/scale', scale)"


def counting_fdg() -> wb.FDG:
    """env steps a seeded random walk weighted by the learner's latest ``gain`` (so no
    replica runs more than an iteration ahead, as with real weights); the learner sums
    rewards and counts its own updates."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "scale": 1.0, "time": time})
    fdg.add_fragment("env", "rng = np.random.default_rng(replica.index)\nobs = np.zeros(2)\nseen = 0", rate="init")
    # a few ms a step, as a real env takes: the driver hears of each iteration while the
    # replicas are at most one ahead (a loop of microseconds would be done before it hears)
    fdg.add_fragment(
        "env", "time.sleep(0.005)\nseen += 1\nobs = obs + rng.random(2)\nreward = obs * scale * gain", rate="step"
    )
    fdg.add_fragment("learner", "updates = 0\ntotal = 0.0\ngain = 1.0", rate="init")
    fdg.add_fragment("learner", LEARNER, rate="iteration")
    return fdg


class At:
    """A run logger that calls ``change()`` once, when iteration ``at`` is recorded."""

    def __init__(self, at: int, change) -> None:
        self.at, self.change, self.result = at, change, None

    def log(self, row: dict) -> None:
        if row["iteration"] == self.at:
            self.result = self.change()

    def close(self) -> None:
        pass


def _landed(run, kind: str) -> int:
    events = [e for e in run.events if e.kind == kind]
    assert len(events) == 1, run.events
    return events[0].iteration


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_re_run_cell_applies_from_the_next_boundary_with_state_kept(policy, client, capsys):
    fdg = counting_fdg()
    edited = LEARNER + "\nwb.log('edited', 1.0)"
    edit = At(EDIT_AT, lambda: fdg.add_fragment("learner", edited, rate="iteration"))
    run = fdg.run(iterations=ITERATIONS, steps=3, policy=policy, cluster=client, progress=False, loggers=[edit])
    assert run.status == "finished" and run.completed_iterations == ITERATIONS
    landed = _landed(run, "edited")
    assert EDIT_AT < landed < ITERATIONS  # the iterations begun finished with the old cell
    metrics = run.metrics
    assert metrics.loc[: landed - 1, "edited"].isna().all()
    assert (metrics.loc[landed:, "edited"] == 1.0).all()
    # state kept: the learner's counter and the env's step counter never restarted
    assert run.state.fragments["learner"][0]["updates"] == ITERATIONS
    assert all(r["seen"] == ITERATIONS * 3 for r in run.state.fragments["env"])
    out = capsys.readouterr().out
    assert "learner: new iteration cell, applies from iteration" in out
    assert fdg.fragments["learner"].cells["iteration"].code == edited  # the FDG keeps the edit


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_an_updated_value_reaches_the_replicas_at_the_next_boundary(policy, client):
    fdg = counting_fdg()
    update = At(EDIT_AT, lambda: fdg.update(scale=2.0))
    run = fdg.run(iterations=ITERATIONS, steps=3, policy=policy, cluster=client, progress=False, loggers=[update])
    landed = _landed(run, "updated")
    scale = run.metrics["learner/scale"]
    assert (scale.loc[: landed - 1] == 1.0).all() and (scale.loc[landed:] == 2.0).all()
    assert run.state.fragments["learner"][0]["updates"] == ITERATIONS


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_an_edit_at_a_boundary_gives_the_same_result_as_no_edit(policy, client):
    """The boundary is exact: re-running a cell unchanged mid-run ends a stretch and starts
    the next from its state; every value comes out bit for bit as without it."""
    cluster = None if policy == "inline" else client  # inline would say the cluster is not used
    plain = counting_fdg().run(iterations=ITERATIONS, steps=3, policy=policy, cluster=cluster, progress=False)
    fdg = counting_fdg()
    rerun = At(EDIT_AT, lambda: fdg.add_fragment("learner", LEARNER, rate="iteration"))
    edited = fdg.run(iterations=ITERATIONS, steps=3, policy=policy, cluster=cluster, progress=False, loggers=[rerun])
    assert [e.kind for e in edited.events] == ["edited"]
    assert edited.state.fragments["learner"][0]["total"] == plain.state.fragments["learner"][0]["total"]
    for a, b in zip(plain.state.fragments["env"], edited.state.fragments["env"]):
        assert np.array_equal(a["obs"], b["obs"]) and a["seen"] == b["seen"]


def test_an_edit_the_running_graph_cannot_take_is_refused_and_the_run_goes_on():
    fdg = counting_fdg()
    refused = []

    def bad_edit():
        try:
            fdg.add_fragment("learner", "updates = undefined_name + 1", rate="iteration")
        except wb.WorkbenchError as exc:
            refused.append(exc)

    run = fdg.run(iterations=ITERATIONS, steps=2, progress=False, loggers=[At(EDIT_AT, bad_edit)])
    assert refused and isinstance(refused[0], wb.FDGError)
    assert run.status == "finished" and run.events == []
    assert "updates += 1" in fdg.fragments["learner"].cells["iteration"].code


def test_update_refuses_names_no_fragment_reads():
    fdg = counting_fdg()
    with pytest.raises(wb.RunConfigError, match="no fragment reads scael"):
        fdg.update(scael=2.0)
    assert fdg.update(scale=3.0) is None and fdg.namespace["scale"] == 3.0  # idle: just set


def test_the_graph_cannot_lose_fragments_while_it_runs():
    fdg = counting_fdg()
    refused = []

    def remove():
        for change in (lambda: fdg.remove_fragment("env"), fdg.clear):
            try:
                change()
            except wb.RunConfigError as exc:
                refused.append(exc)

    fdg.run(iterations=3, steps=2, progress=False, loggers=[At(1, remove)])
    assert len(refused) == 2 and set(fdg.fragments) == {"env", "learner"}
