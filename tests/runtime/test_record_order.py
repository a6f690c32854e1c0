"""An iteration's metrics come out in replica order, whatever order the replicas' reports
arrived in: two runs with one seed give the same episode lists (and so the same "mean of
the last 20 episodes"), which arrival order had made differ under coarse."""

from __future__ import annotations

import itertools

from workbench.runtime.engine.bookkeeping import absorb
from workbench.runtime.replicas.program import TaskReport
from workbench.runtime.state.run import IterationRecord, Run


def _report(group: str, replica: int, returns: list[float], loss: float) -> TaskReport:
    return TaskReport(
        group,
        replica,
        f"w{replica}",
        iterations=[4],
        metrics={4: {"charts/episodic_return": returns, "losses/loss": [loss]}},
        env_steps={4: 8},
    )


REPORTS = [
    _report("actor+env", 1, [30.0, 31.0], 0.1),
    _report("actor+env", 0, [10.0], 0.2),
    _report("learner", 0, [], 0.3),
    _report("actor+env", 2, [20.0], 0.4),
]


def test_every_arrival_order_gives_the_same_lists_in_replica_order():
    seen = set()
    for order in itertools.permutations(REPORTS):
        record = IterationRecord(4)
        for report in order:
            absorb(record, report, with_timing=True)
        record.settle()
        seen.add(tuple((k, tuple(v)) for k, v in sorted(record.metrics.items())))
        assert record.metrics["charts/episodic_return"] == [10.0, 30.0, 31.0, 20.0]
        assert record.env_steps == 32 and record.replica_episodes == {
            "actor+env[1]": 2,
            "actor+env[0]": 1,
            "actor+env[2]": 1,
        }
    assert len(seen) == 1


def test_the_run_records_the_settled_order():
    late_first = IterationRecord(4)
    for report in reversed(REPORTS):
        absorb(late_first, report, with_timing=True)
    run = Run(policy_name="coarse", iterations=5, steps=1, window=3)
    run.record(late_first)
    assert run.episode_returns == [10.0, 30.0, 31.0, 20.0]
    assert run.rows[-1]["charts/mean_return_last_3"] == (30.0 + 31.0 + 20.0) / 3
