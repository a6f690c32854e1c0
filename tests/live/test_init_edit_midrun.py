"""An init cell re-run while a run trains (docs/live_changes.md): at the boundary the edit
lands at, the new init cell runs in each replica of its fragment and the fragment's kept
state is laid back over what it built — the names it adds get their first values there,
every name the fragment had keeps its trained value — the same under inline and on a
cluster. Before, inline never ran it (a cell reading the new name failed with NameError)
and coarse died with a raw ``KeyError`` where a new interface's value was sent."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import workbench as wb
from tests.live.test_live_changes import ITERATIONS, At, counting_fdg

EDIT_AT = 2
ENV_INIT = "rng = np.random.default_rng(replica.index)\nobs = np.zeros(2)\nseen = 0"
ENV_STEP = "time.sleep(0.005)\nseen += 1\nobs = obs + rng.random(2)\nreward = obs * scale * gain"
LEARNER_INIT = "updates = 0\ntotal = 0.0\ngain = 1.0"


def _edited(run) -> list[int]:
    return [e.iteration for e in run.events if e.kind == "edited"]


def _announced(out: str, what: str) -> int:
    found = re.findall(rf"workbench: {re.escape(what)}.*?applies from iteration (\d+) at the earliest", out)
    assert len(found) == 1, out
    return int(found[0])


def _check_landed(run, metric: str, value: float, landed: int) -> None:
    assert run.status == "finished" and run.completed_iterations == ITERATIONS, run.error
    logged = run.metrics[metric]
    assert logged.loc[: landed - 1].isna().all()  # the old cells ran up to the boundary
    assert (logged.loc[landed:] == value).all()  # from it on, the init cell's new value
    # state kept: the init cells ran again, yet no counter restarted
    assert run.state.fragments["learner"][0]["updates"] == ITERATIONS
    assert all(r["seen"] == ITERATIONS * 3 for r in run.state.fragments["env"])


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_name_an_edited_init_cell_adds_is_there_for_its_own_step_cell(policy, client, capsys):
    """inline: the step cell reading the init cell's new name failed with NameError."""
    fdg = counting_fdg()

    def edit():
        fdg.add_fragment("env", ENV_INIT + "\nmarker = 7.0", rate="init")
        fdg.add_fragment("env", ENV_STEP + "\nwb.log('env/marker', marker)", rate="step")

    run = fdg.run(
        iterations=ITERATIONS, steps=3, policy=policy, cluster=client, progress=False, loggers=[At(EDIT_AT, edit)]
    )
    landed = _edited(run)
    assert len(landed) == 2 and landed[0] == landed[1] and EDIT_AT < landed[0] < ITERATIONS, run.events
    _check_landed(run, "env/marker", 7.0, landed[0])
    assert all(r["marker"] == 7.0 for r in run.state.fragments["env"])
    out = capsys.readouterr().out
    assert (
        "env: new init cell (it runs there in each replica of env to give marker a first value; "
        "rng, obs, seen keep their trained values), applies from iteration"
    ) in out
    assert _announced(out, "env: new init cell") <= landed[0]


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_new_interface_from_an_edited_init_cell_reaches_another_fragment(policy, client):
    """coarse: sending the learner's new init value to the env replicas died with a raw
    KeyError naming no cell; inline asked to give it a first value in that very cell."""
    fdg = counting_fdg()

    def edit():
        fdg.add_fragment("learner", LEARNER_INIT + "\nbaseline = 5.0", rate="init")
        fdg.add_fragment("env", ENV_STEP + "\nwb.log('env/baseline', baseline)", rate="step")

    run = fdg.run(
        iterations=ITERATIONS, steps=3, policy=policy, cluster=client, progress=False, loggers=[At(EDIT_AT, edit)]
    )
    landed = _edited(run)
    assert len(landed) == 2 and landed[0] == landed[1], run.events
    _check_landed(run, "env/baseline", 5.0, landed[0])
    assert run.state.fragments["learner"][0]["baseline"] == 5.0


def test_an_init_edit_that_adds_no_name_says_it_changes_nothing_in_this_run(capsys):
    """Its names keep their trained values (the fragment keeps its state): said, not silent."""
    fdg = counting_fdg()
    edit = At(EDIT_AT, lambda: fdg.add_fragment("learner", "updates = 100\ntotal = 0.0\ngain = 1.0", rate="init"))
    run = fdg.run(iterations=ITERATIONS, steps=3, progress=False, loggers=[edit])
    assert run.status == "finished" and len(_edited(run)) == 1
    assert run.state.fragments["learner"][0]["updates"] == ITERATIONS  # not reset to 100
    out = capsys.readouterr().out
    assert (
        "learner: new init cell (it adds no name, so it changes nothing in this run: updates, "
        "total, gain keep their trained values"
    ) in out
    assert "It is the init cell of the next run" in out


def test_a_value_an_init_cell_declares_but_never_binds_is_named_not_a_key_error(client):
    """A value sent to another group after init that the cell never bound: the cell's error."""
    fdg = counting_fdg()
    fdg.add_fragment("learner", LEARNER_INIT, rate="init", writes=("baseline",))
    fdg.add_fragment("env", ENV_STEP + "\nb = baseline", rate="step")
    with pytest.raises(wb.FragmentRuntimeError, match=r"init cell did not bind 'baseline'") as raised:
        fdg.run(iterations=2, steps=3, policy="coarse", cluster=client, progress=False)
    assert raised.value.fragment == "learner"


def _wait(what, until, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_init_cell_re_run_from_the_magics_while_a_background_run_trains(ip, capsys):
    """The outside tester's notebook: %%fragment env --init re-run mid-run, then the step
    cell edited to read the init cell's new name; inline, through IPython."""
    fdg = ip.magics_manager.registry["WorkbenchMagics"].fdg
    for cell in (
        "import time",
        "%%fragment env --init\nobs = np.zeros(2)\n",
        "%%fragment actor\naction = obs + 1\n",
        "%%fragment env\nobs = action * 0.5\nreward = action.copy()\n",
        "%%fragment learner\ntime.sleep(0.01)\nwb.log('T', reward.shape[0])\n",
    ):
        assert ip.run_cell(cell).success
    ip.run_line_magic("fdg", "run --background --iterations 100000 --steps 2 --no-progress")
    try:
        _wait("a first iteration", lambda: fdg.last_run is not None and fdg.last_run.completed_iterations)
        assert ip.run_cell("%%fragment env --init\nobs = np.zeros(2)\nmarker = 7.0\n").success
        _wait("the init edit to land", lambda: len(_edited(fdg.last_run)) == 1)
        assert ip.run_cell(
            "%%fragment env\nobs = action * 0.5\nreward = action.copy()\nwb.log('env/marker', marker)\n"
        ).success
        _wait("the step edit to land", lambda: len(_edited(fdg.last_run)) == 2)
        step_at = _edited(fdg.last_run)[1]
        _wait("an iteration with the step edit", lambda: fdg.last_run.completed_iterations > step_at + 1)
    finally:
        run = ip.run_line_magic("fdg", "stop")
    assert run.status == "stopped" and run.error is None
    marker = run.metrics["env/marker"]
    assert marker.loc[: step_at - 1].isna().all() and (marker.loc[step_at:] == 7.0).all()
    assert np.isfinite(run.metrics["T"]).all()


class _Tracked:
    """An env that remembers every instance an init cell built (the run is inline)."""

    built: list = []

    def __init__(self) -> None:
        type(self).built.append(self)
        self.closed = False

    def reset(self):
        return np.zeros((2, 2))

    def step(self, action):
        return np.zeros((2, 2)), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}

    def close(self) -> None:
        self.closed = True


def test_the_envs_an_edited_init_cell_builds_for_names_it_keeps_are_closed():
    """The init cell runs again and builds its envs afresh, but the fragment keeps its
    trained ones: the fresh ones are closed, not left open (a vector env's subprocesses
    with them)."""
    _Tracked.built = []
    fdg = wb.FDG(namespace={"np": np, "Tracked": _Tracked, "wb": wb, "time": time})
    fdg.add_fragment("env", "envs = Tracked()\nobs = envs.reset()", rate="init")
    fdg.add_fragment("actor", "action = np.zeros(len(obs), np.int64)", rate="step")
    fdg.add_fragment(
        "env",
        "time.sleep(0.005)  # time for the edit to land\nobs, reward, terminated, truncated, info = envs.step(action)",
        rate="step",
    )
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    edit = At(EDIT_AT, lambda: fdg.add_fragment("env", "envs = Tracked()\nobs = envs.reset()\nmarker = 1", rate="init"))
    run = fdg.run(iterations=ITERATIONS, steps=3, policy="inline", progress=False, loggers=[edit], keep_state=True)
    assert _edited(run) and run.status == "finished", run.events
    assert run.state.fragments["env"][0]["marker"] == 1
    first, fresh = _Tracked.built  # the run's, and the one the edited init cell built
    assert fresh.closed, "the env the edited init cell built was left open"
