"""Re-placing fragments while a run goes: state moves at an iteration boundary, learning goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cluster.connect import inventory_of
from workbench.fdg.board import move_fragment
from workbench.errors import RunConfigError
from workbench.notebook import load_notebook

from tests.runtime.test_checkpoint import weights_fdg

QUICKSTART = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


class ReplaceAt:
    """A run logger that asks for a new placement once iteration ``at`` has finished."""

    def __init__(self, fdg, at: int, make_policy) -> None:
        self.fdg, self.at, self.make_policy = fdg, at, make_policy
        self.return_then = None
        self.policy_before = None

    def log(self, row: dict) -> None:
        if row["iteration"] == self.at:
            run = self.fdg.last_run
            self.return_then, self.policy_before = run.mean_return(), run.policy
            self.fdg.replace(self.make_policy(run.policy))

    def close(self) -> None:
        pass


def _learner_elsewhere(fdg, inventory):
    def make(policy):
        home = policy.group_of("learner").workers[0]
        other = next(n for n in inventory.names if n != home)
        return move_fragment(policy, fdg, "learner", other, "cpu", inventory)

    return make


GATE_SOURCE = """
def gate(stepped, opened, limit, timeout=120.0):
    # hold an env replica past its ``limit``-th step until the file ``opened`` exists
    import os, time
    deadline = time.monotonic() + timeout
    while stepped > limit and not os.path.exists(opened) and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def _gate():
    """A function pickled by value (as a notebook cell's is): workers cannot import tests."""
    namespace = {"__name__": "workbench_test_gate"}
    exec(GATE_SOURCE, namespace)
    return namespace["gate"]


def test_the_learner_moves_with_its_weights_and_optimiser_state(client, tmp_path, monkeypatch):
    """After the move the learner carries on from its own latest update: its counter never
    restarts and its weights are not the init cell's."""
    from workbench.cluster.backend import DaskBackend

    fdg = weights_fdg()
    opened = tmp_path / "fenced"
    fdg.namespace.update(gate=_gate(), opened=str(opened))
    fdg.add_fragment(
        "env", "rng = np.random.default_rng(replica.index)\nobs = rng.normal(size=(4, 3))\nstepped = 0", rate="init"
    )
    # each env replica waits after iteration 2's steps (2 per iteration) until the fence has
    # closed: the move lands mid-run however far a busy machine lets the driver lag
    fdg.add_fragment(
        "env", "stepped += 1\ngate(stepped, opened, 6)\nobs = rng.normal(size=(4, 3)).astype(np.float32)", rate="step"
    )
    fence = DaskBackend.fence

    def fence_then_open(self, at_least):
        boundary = fence(self, at_least)
        opened.touch()
        return boundary

    monkeypatch.setattr(DaskBackend, "fence", fence_then_open)
    mover = ReplaceAt(fdg, 2, _learner_elsewhere(fdg, inventory_of(client)))
    run = fdg.run(iterations=10, steps=2, policy="coarse", cluster=client, progress=False, loggers=[mover])
    assert run.policy.group_of("learner").workers != mover.policy_before.group_of("learner").workers
    rows = run.rows
    assert [row["iteration"] for row in rows] == list(range(10))
    updates = [row["learner/updates"] for row in rows]
    assert updates[:6] == [1, 2, 3, 4, 5, 6] and all(b > a for a, b in zip(updates, updates[1:]))
    assert rows[6]["learner/w_before"] != rows[0]["learner/w_before"]


def test_moving_the_ppo_learner_mid_run_still_solves_cartpole(client):
    fdg, options = load_notebook(QUICKSTART)
    mover = ReplaceAt(fdg, 15, _learner_elsewhere(fdg, inventory_of(client)))
    run = fdg.run(
        iterations=150,
        steps=options["steps"],
        policy="coarse",
        cluster=client,
        target_return=options["target_return"],
        progress=False,
        loggers=[mover],
    )
    replaced = [e for e in run.events if e.kind == "replaced"]
    # at the first exact boundary after iteration 15: every iteration begun by then finishes
    assert len(replaced) == 1 and 16 <= replaced[0].iteration <= 18
    assert [row["iteration"] for row in run.rows] == list(range(len(run.rows)))  # no gap, no repeat
    assert run.solved_at is not None, (mover.return_then, run.summary())


def test_inline_to_cluster_mid_run_still_solves_cartpole(client):
    fdg, options = load_notebook(QUICKSTART)
    mover = ReplaceAt(fdg, 10, lambda policy: "coarse")
    run = fdg.run(
        iterations=150,
        steps=options["steps"],
        policy="inline",
        cluster=client,
        target_return=options["target_return"],
        progress=False,
        loggers=[mover],
    )
    assert run.policy_name == "SingleLearnerCoarse"
    assert mover.policy_before.in_process and not run.policy.in_process
    assert run.solved_at is not None, (mover.return_then, run.summary())


def test_replace_needs_a_running_run_and_a_fitting_policy():
    fdg, _ = load_notebook(QUICKSTART)
    with pytest.raises(RunConfigError, match="nothing is running"):
        fdg.replace("coarse")
    from workbench.errors import PlacementError
    from workbench.fdg.policy import Group, Policy

    with pytest.raises(PlacementError, match="does not place fragment"):
        fdg.replace(Policy("custom", (Group(("actor",), 1, ("0",)),)))


def test_a_change_asked_for_as_the_run_ends_is_said_not_applied():
    """The boundary it waited for was the run's end: the run says so, it does not drop it."""
    fdg = weights_fdg()
    mover = ReplaceAt(fdg, 3, lambda policy: "inline")  # the last iteration's row
    run = fdg.run(iterations=4, steps=2, policy="inline", progress=False, loggers=[mover])
    assert run.status == "finished" and len(run.rows) == 4
    said = [e for e in run.events if e.kind == "not applied"]
    assert len(said) == 1 and said[0].iteration == 4, run.events
    assert "re-placement under inline: not applied, the run ended first" in said[0].message
    assert "finished its iterations at iteration 4" in said[0].message


def test_a_re_placement_is_said_when_asked_for_and_when_it_lands(capsys):
    """As an edit's or an update's notice: the call says it at once, the run when it lands."""
    fdg = weights_fdg()
    mover = ReplaceAt(fdg, 1, lambda policy: "inline")
    run = fdg.run(iterations=6, steps=2, policy="inline", progress=False, loggers=[mover])
    assert run.status == "finished"
    out = capsys.readouterr().out
    asked = "workbench: re-placing the run under inline at its next iteration boundary"
    assert out.count(asked) == 1
    assert [e.kind for e in run.events] == ["replaced"]
    assert out.index(asked) < out.index("re-placed at iteration")
