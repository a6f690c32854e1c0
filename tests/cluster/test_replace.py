"""Re-placing fragments while a run goes: state moves at an iteration boundary, learning goes on."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cluster.connect import inventory_of
from workbench.fdg.board import move_fragment
from workbench.fdg.errors import RunConfigError
from workbench.notebook import load_notebook

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


def test_moving_the_learner_to_another_worker_mid_run_keeps_learning(client):
    fdg, options = load_notebook(QUICKSTART)
    inventory = inventory_of(client)

    def learner_elsewhere(policy):
        home = policy.group_of("learner").workers[0]
        other = next(n for n in inventory.names if n != home)
        return move_fragment(policy, fdg, "learner", other, "cpu", inventory)

    mover = ReplaceAt(fdg, 15, learner_elsewhere)
    run = fdg.run(iterations=80, steps=options["steps"], policy="coarse", cluster=client,
                  target_return=options["target_return"], progress=False, loggers=[mover])

    replaced = [e for e in run.events if e["event"] == "replaced"]
    assert len(replaced) == 1 and replaced[0]["iteration"] == 16
    before = mover.policy_before.group_of("learner").workers
    assert run.policy.group_of("learner").workers != before  # it did move
    assert [row["iteration"] for row in run.rows] == list(range(len(run.rows)))  # no gap, no repeat
    # nothing learned was lost: returns keep rising from where they were
    assert run.mean_return() > max(200, 2 * mover.return_then), (mover.return_then, run.summary())


def test_inline_to_cluster_mid_run(client):
    fdg, options = load_notebook(QUICKSTART)
    mover = ReplaceAt(fdg, 10, lambda policy: "coarse")
    run = fdg.run(iterations=40, steps=options["steps"], policy="inline", cluster=client,
                  progress=False, loggers=[mover])
    assert run.policy_name == "SingleLearnerCoarse" and run.completed_iterations == 40
    assert mover.policy_before.in_process and not run.policy.in_process
    assert run.mean_return() > max(100, 1.5 * mover.return_then), (mover.return_then, run.summary())


def test_replace_needs_a_running_run_and_a_fitting_policy():
    fdg, _ = load_notebook(QUICKSTART)
    with pytest.raises(RunConfigError, match="nothing is running"):
        fdg.replace("coarse")
    from workbench.fdg.errors import PlacementError
    from workbench.fdg.policy import Group, Policy

    with pytest.raises(PlacementError, match="does not place fragment"):
        fdg.replace(Policy("custom", (Group(("actor",), 1, ("0",)),)))
