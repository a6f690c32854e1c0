"""policy="auto" on a learner that never calls wb.allreduce: MultiLearner is not tried (its
trial would train independent learners), no IndependentLearnersWarning, and auto says why.

An outside-in tester found ``dqn.build_fdg().run(iterations=12, steps=16, policy="auto")``
warning of independent learners, measuring MultiLearner anyway, and once continuing with it.
"""

from __future__ import annotations

from tests.cluster.test_coarse import _replicas_left
from tests.cluster.test_policies import _allreduce_fdg
from tests.conftest import toy_fdg
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import IndependentLearnersWarning
from workbench.fdg.auto_candidates import auto_candidates

TWO_WORKERS = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1")))
SAID = (
    "MultiLearner: not tried, the learner never calls wb.allreduce (independent learners would change what is learned)"
)


def test_the_shipped_dqn_is_not_offered_multilearner():
    from workbench.algorithms import dqn

    for fdg in (dqn.build_fdg(), dqn.build_fdg(buffer="fragment")):
        candidates = auto_candidates(fdg, TWO_WORKERS)
        assert [name for name, _ in candidates] == ["SingleLearnerCoarse", "SingleLearnerFine", "GPUOnly"]
        assert candidates.left_out == (SAID,)


def test_auto_never_measures_multilearner_for_a_learner_without_allreduce(client, capsys, recwarn):
    fdg = toy_fdg()  # the counters' learner sums what it saw: no wb.allreduce
    # 9 iterations: enough for the four candidates auto tried before, so a regression shows
    # as MultiLearner measured, not as a run refused for being too short
    run = fdg.run(iterations=9, steps=2, policy="auto", cluster=client, progress=False)
    assert run.status == "finished", run.error
    assert [row["policy"] for row in run.auto_table] == ["SingleLearnerCoarse", "SingleLearnerFine", "GPUOnly"]
    assert run.completed_iterations == 9 and "MultiLearner" not in run.policy_name
    assert not [w for w in recwarn if issubclass(w.category, IndependentLearnersWarning)], [
        str(w.message) for w in recwarn
    ]
    printed = capsys.readouterr().out
    assert "continuing with this" in printed and f"  {SAID}" in printed.splitlines()
    assert _replicas_left(client) == 0


def test_auto_still_measures_multilearner_for_a_learner_that_allreduces(client, capsys, recwarn):
    run = _allreduce_fdg().run(iterations=9, steps=2, policy="auto", cluster=client, progress=False)
    assert run.status == "finished", run.error
    assert [row["policy"] for row in run.auto_table] == [
        "SingleLearnerCoarse",
        "SingleLearnerFine",
        "MultiLearner",
        "GPUOnly",
    ]
    assert not [w for w in recwarn if issubclass(w.category, IndependentLearnersWarning)]
    assert "not tried" not in capsys.readouterr().out
