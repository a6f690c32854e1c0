"""The placement board's logic: drops and replica changes on a policy, refusals with reasons."""

from __future__ import annotations

import pytest

from workbench.fdg.board import fill_preset, load_policy, move_fragment, set_replicas
from workbench.errors import PlacementError
from workbench.fdg.policy import Inline, SingleLearnerCoarse

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


@pytest.mark.parametrize(
    "worker, device, message",
    [
        ("w7", "cpu", "not in the cluster"),
        ("w0", "gpu", "has no GPU"),
        ("w0", "tpu", "device must be"),
    ],
)
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


def test_set_replicas_leaves_out_workers_that_have_left(ppo_fdg):
    # actor+env on w0, w1; w1 leaves: resizing is a way to recover
    policy = SingleLearnerCoarse().place(ppo_fdg, make_inventory(2))
    shrunk = set_replicas(policy, ppo_fdg, "env", 1, make_inventory(1))
    assert shrunk.group_of("env").workers == ("w0",)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("coarse", "SingleLearnerCoarse"),
        ("fine", "SingleLearnerFine"),
        ("multilearner", "MultiLearner"),
        ("gpuonly", "GPUOnly"),
        ("async", "Async"),
        ("MultiLearner", "MultiLearner"),
    ],
)
def test_fill_preset_places_the_preset_on_the_cluster(ppo_fdg, name, expected):
    policy = fill_preset(name, ppo_fdg, make_inventory(2, gpu_at=1))
    assert policy.name == expected
    assert {f for g in policy.groups for f in g.fragments} == set(ppo_fdg.fragments)


def test_fill_preset_auto_needs_a_measured_run(ppo_fdg):
    inv = make_inventory(2)
    with pytest.raises(PlacementError, match="chosen at run time.*SingleLearnerCoarse"):
        fill_preset("auto", ppo_fdg, inv)
    table = [
        {"policy": "SingleLearnerCoarse", "rate": 10.0, "unit": "env-steps/s"},
        {"policy": "GPUOnly", "rate": 30.0, "unit": "env-steps/s"},
    ]
    assert fill_preset("auto", ppo_fdg, inv, auto_table=table).name == "GPUOnly"
    for bad in ("inline", "sideways"):
        with pytest.raises(PlacementError, match="unknown preset"):
            fill_preset(bad, ppo_fdg, inv)


def test_load_policy_round_trips_and_refuses_what_a_board_cannot_show(ppo_fdg, coarse):
    inv = make_inventory(2)
    assert load_policy(coarse.to_json(), ppo_fdg, inv) == coarse
    with pytest.raises(PlacementError, match="malformed"):
        load_policy("[1, 2", ppo_fdg, inv)
    with pytest.raises(PlacementError, match="not in the cluster"):
        load_policy(coarse.to_json(), ppo_fdg, make_inventory(1))
    inline = Inline().place(ppo_fdg)
    with pytest.raises(PlacementError, match="calling process"):
        load_policy(inline.to_json(), ppo_fdg, inv)
