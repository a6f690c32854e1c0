"""What policy="auto" may try: only placements that keep what is learned (no cluster, no torch).

MultiLearner is offered only when the learner's cells call ``wb.allreduce``; without it the
replicas would be independent learners, so auto leaves it out and says why. A real run of
this is in ``tests/cluster/test_auto_independent_learners.py``.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

import workbench as wb
from workbench.auto_trials import auto_summary
from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import IndependentLearnersWarning
from tests.fdg.test_plan_checks import _graph as plain_graph
from workbench.fdg.auto_candidates import auto_candidates

TWO_WORKERS = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1")))
LEFT_OUT = (
    "MultiLearner: not tried, the learner never calls wb.allreduce (independent learners would change what is learned)"
)


def _graph(learner_code: str, namespace: dict | None = None) -> Graph:
    """test_plan_checks' loop; as an FDG with a notebook's names when ``namespace`` is given."""
    graph = plain_graph(learner_code)
    if namespace is None:
        return graph
    fdg = wb.FDG(namespace=namespace)
    for name, fragment in graph.fragments.items():
        for rate, cell in fragment.cells.items():
            fdg.add_fragment(name, cell.code, rate=rate)
    return fdg


def _averaged(grad):
    """A notebook's helper that averages a gradient across learner replicas."""
    return COLLECTIVES.allreduce(grad)


COLLECTIVES = SimpleNamespace(allreduce=lambda grad: grad)  # stands in for wb: only its name is read


def _names(candidates) -> list[str]:
    return [name for name, _ in candidates]


def test_a_learner_that_allreduces_is_offered_multilearner():
    candidates = auto_candidates(_graph("w = w - wb.allreduce(reward.mean())"), TWO_WORKERS)
    assert _names(candidates) == ["SingleLearnerCoarse", "SingleLearnerFine", "MultiLearner", "GPUOnly"]
    assert candidates.left_out == ()


def test_an_allreduce_inside_a_notebook_function_counts_as_one():
    """The same analysis as the plan's warning: the cell's functions are followed (PPO's
    update all-reduces inside ``_sync_and_clip``)."""
    namespace = {"step": _averaged}
    candidates = auto_candidates(_graph("w = w - step(reward.mean())", namespace), TWO_WORKERS)
    assert "MultiLearner" in _names(candidates)


def test_a_learner_without_allreduce_is_not_offered_multilearner_and_auto_says_why():
    candidates = auto_candidates(_graph("w = w - reward.mean()"), TWO_WORKERS)
    assert _names(candidates) == ["SingleLearnerCoarse", "SingleLearnerFine", "GPUOnly"]
    assert candidates.left_out == (LEFT_OUT,)


def test_one_worker_multilearner_is_one_learner_and_stays_offered():
    one = Inventory((WorkerInfo("tcp://a:1", "w0"),))
    assert "MultiLearner" in _names(auto_candidates(_graph("w = w - reward.mean()"), one))


def test_probing_the_candidates_warns_of_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndependentLearnersWarning)
        auto_candidates(_graph("w = w - reward.mean()"), TWO_WORKERS, lag=1)


@pytest.mark.parametrize("code", ["w = w - reward.mean()", "w = w - wb.allreduce(reward.mean())"])
def test_presets_that_act_on_older_weights_only_behind_auto_lag(code):
    """Async is never tried; Pipelined only with --auto-lag, last (its learner is one replica,
    so an allreduce makes no difference to it)."""
    assert "Pipelined" not in _names(auto_candidates(_graph(code), TWO_WORKERS))
    lagged = auto_candidates(_graph(code), TWO_WORKERS, lag=2)
    assert _names(lagged)[-1] == "Pipelined" and dict(lagged)["Pipelined"].lag == 2
    assert "Async" not in _names(lagged)


def test_the_summary_prints_what_was_left_out_under_the_table():
    table = [
        {"policy": "SingleLearnerCoarse", "rate": 900.0, "unit": "env-steps/s"},
        {"policy": "GPUOnly", "rate": 1200.0, "unit": "env-steps/s"},
    ]
    lines = auto_summary(table, "GPUOnly", (LEFT_OUT,)).splitlines()
    assert lines[-1] == f"  {LEFT_OUT}" and "continuing with this" in lines[2]
    assert auto_summary(table, "GPUOnly").splitlines() == lines[:-1]  # nothing left out: no line
