"""Placements that would silently mean something else are refused or warned about at plan time."""

from __future__ import annotations

import json
import warnings

import pytest

import workbench as wb
from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import IndependentLearnersWarning, make_plan
from workbench.fdg.policy import Group, MultiLearner, Policy

TWO_WORKERS = Inventory((WorkerInfo("tcp://a:1", "0"), WorkerInfo("tcp://b:1", "1")))


def _graph(learner_code: str) -> Graph:
    g = Graph()
    g.add_fragment("env", "obs = 0", rate="init")
    g.add_fragment("actor", "action = obs + 1", rate="step")
    g.add_fragment("env", "obs = action\nreward = obs", rate="step")
    g.add_fragment("learner", "w = 0.0", rate="init")
    g.add_fragment("learner", learner_code, rate="iteration")
    return g


def test_multilearner_without_an_allreduce_warns_naming_the_fix():
    g = _graph("grad = reward.mean()\nw = w - grad")
    with pytest.warns(IndependentLearnersWarning, match=r"'learner' runs as 2 replicas.*wb\.allreduce"):
        plan = make_plan(g, MultiLearner(learners=2).place(g, TWO_WORKERS))
    assert "WARNING: fragment 'learner' runs as 2 replicas" in plan.explain()
    assert "one replica (policy coarse)" in plan.explain()


def test_multilearner_with_an_allreduce_or_one_learner_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndependentLearnersWarning)
        g = _graph("grad = wb.allreduce(reward.mean())\nw = w - grad")
        assert make_plan(g, MultiLearner(learners=2).place(g, TWO_WORKERS)).warnings == []
        g = _graph("w = w - reward.mean()")
        assert make_plan(g, MultiLearner(learners=1).place(g, TWO_WORKERS)).warnings == []


@pytest.mark.parametrize("bad", [2.7, True, False, "2", 0, None])
def test_policy_json_replicas_must_be_whole_numbers(bad):
    text = json.dumps({"name": "p", "groups": [{"fragments": ["a"], "replicas": bad}]})
    with pytest.raises(PlacementError, match=r"replicas must be a whole number ≥ 1, got"):
        Policy.from_json(text)


def test_policy_json_replicas_round_trips_integers():
    policy = Policy("p", (Group(("a",), 3),))
    assert Policy.from_json(policy.to_json()).groups[0].replicas == 3


def test_an_in_process_gpu_group_without_a_gpu_is_refused():
    from workbench.devices import DeviceError, gpus_here

    if gpus_here():
        pytest.skip("this machine has a GPU")
    fdg = wb.FDG()
    fdg.add_fragment("a", "x = 1", rate="iteration")
    policy = Policy.from_json(json.dumps({"groups": [{"fragments": ["a"], "workers": ["local"], "device": "gpu"}]}))
    with pytest.raises((PlacementError, DeviceError), match="GPU"):
        fdg.run(iterations=1, steps=1, policy=policy, progress=False)


def _sync(grad):
    import workbench as wb

    return wb.allreduce(grad)


def _update(w, grad):
    return w - _sync(grad)  # the all-reduce is two calls down, as in PPO's _sync_and_clip


def _update_alone(w, grad):
    return w - grad


@pytest.mark.parametrize("module", ["ppo", "mappo"])
def test_the_shipped_algorithms_all_reduce_inside_functions_and_are_not_warned(module):
    import importlib

    fdg = importlib.import_module(f"workbench.algorithms.{module}").build_fdg()
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndependentLearnersWarning)
        make_plan(fdg, MultiLearner(learners=2).place(fdg, TWO_WORKERS))


def test_an_allreduce_reached_through_the_notebooks_functions_counts_and_a_missing_one_warns():
    quiet = wb.FDG(namespace={"update": _update})
    loud = wb.FDG(namespace={"update": _update_alone})
    for fdg in (quiet, loud):
        for (name, rate), code in {
            ("env", "init"): "obs = 0",
            ("actor", "step"): "action = obs + 1",
            ("env", "step"): "obs = action\nreward = obs",
            ("learner", "init"): "w = 0.0",
            ("learner", "iteration"): "w = update(w, reward.mean())",
        }.items():
            fdg.add_fragment(name, code, rate=rate)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndependentLearnersWarning)
        make_plan(quiet, MultiLearner(learners=2).place(quiet, TWO_WORKERS))
    with pytest.warns(IndependentLearnersWarning, match="never call wb.allreduce"):
        make_plan(loud, MultiLearner(learners=2).place(loud, TWO_WORKERS))


def test_an_evaluator_of_the_learners_weights_is_no_learner_to_warn_about():
    """A replicated fragment that reads only what the learner writes (it evaluates the
    weights, it logs) learns nothing to average; a learner that reads experience through
    a buffer fragment with step cells is still warned."""
    g = _graph("w = w - wb.allreduce(reward.mean())")
    g.add_fragment("evaluator", "score = 2 * w", rate="iteration")
    policy = Policy(
        "p",
        (
            Group(("env", "actor"), 2, ("0", "1")),
            Group(("learner",), 2, ("0", "1")),
            Group(("evaluator",), 2, ("0", "1")),
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndependentLearnersWarning)
        assert make_plan(g, policy).warnings == []
    g = _graph("w = w - batch.mean()")
    g.add_fragment("buffer", "kept = reward", rate="step")
    g.add_fragment("buffer", "batch = kept", rate="iteration")
    policy = Policy("p", (Group(("env", "actor", "buffer"), 2, ("0", "1")), Group(("learner",), 2, ("0", "1"))))
    with pytest.warns(IndependentLearnersWarning, match="'learner' runs as 2 replicas"):
        make_plan(g, policy)
