"""The placement board's logic: drops and replica changes on a policy, refusals with reasons."""
from __future__ import annotations

import pytest

from workbench.fdg.board import move_fragment, set_replicas
from workbench.fdg.errors import PlacementError
from workbench.fdg.policy import SingleLearnerCoarse

from .conftest import make_inventory


@pytest.fixture
def coarse(ppo_fdg):
    return SingleLearnerCoarse().place(ppo_fdg, make_inventory(2))


def test_drop_the_learner_on_the_other_worker(ppo_fdg, coarse):
    moved = move_fragment(coarse, ppo_fdg, "learner", "w1", "cpu", make_inventory(2))
    assert moved.group_of("learner").workers == ("w1",)
    assert moved.group_of("actor") == coarse.group_of("actor")


def test_drop_on_a_gpu_worker(ppo_fdg, coarse):
    inv = make_inventory(2, gpu_at=1)
    moved = move_fragment(coarse, ppo_fdg, "learner", "w1", "gpu", inv)
    assert moved.group_of("learner").device == "gpu"


def test_a_fused_fragment_leaves_its_group_and_joins_the_one_on_the_target(ppo_fdg, coarse):
    # env leaves actor+env (2 replicas) for the learner's single replica on w0: the two
    # actors' actions are gathered to it every step and its observations scattered back
    moved = move_fragment(coarse, ppo_fdg, "env", "w0", "cpu", make_inventory(2))
    assert set(moved.group_of("env").fragments) == {"env", "learner"}
    assert moved.group_of("actor").fragments == ("actor",) and moved.group_of("actor").replicas == 2


@pytest.mark.parametrize("worker, device, message", [
    ("w7", "cpu", "not in the cluster"),
    ("w0", "gpu", "has no GPU"),
    ("w0", "tpu", "device must be"),
])
def test_refused_drops_say_why(ppo_fdg, coarse, worker, device, message):
    with pytest.raises(PlacementError, match=message):
        move_fragment(coarse, ppo_fdg, "learner", worker, device, make_inventory(2))


def test_set_replicas_spreads_over_workers(ppo_fdg, coarse):
    inv = make_inventory(3)
    grown = set_replicas(coarse, ppo_fdg, "env", 3, inv)
    assert grown.group_of("env").replicas == 3 and grown.group_of("env").workers == ("w0", "w1", "w2")
    with pytest.raises(PlacementError, match="≥ 1"):
        set_replicas(coarse, ppo_fdg, "env", 0, inv)


def test_incompatible_replica_counts_are_refused(ppo_fdg, coarse):
    inv = make_inventory(3)
    with pytest.raises(PlacementError, match="cannot feed"):
        set_replicas(set_replicas(coarse, ppo_fdg, "learner", 2, inv), ppo_fdg, "actor", 3, inv)
