"""Snapshots paced to their cost when the run left ``snapshot_every`` to workbench: a big
learner state is snapshotted at multiples of a power of two, a small one every iteration, and
an explicit ``snapshot_every`` is kept as given. Driven through the real driver and the
in-process backend (their snapshots are the cluster's: the same loop sends them)."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.fdg.plan import make_plan
from workbench.fdg.policy import resolve_policy
from workbench.runtime.driver import drive
from workbench.runtime.inline import InlineBackend
from workbench.runtime.replica import group_program
from workbench.runtime.snapshot_pacing import BIG_BYTES, MOST, SnapshotPacer


def _snapshotted(floats: int, iterations: int = 24, **snapshots) -> list[int]:
    """The iterations for which every replica sent a snapshot, with a learner holding
    ``floats`` float64s and iterations of ~3 ms."""
    import time

    fdg = wb.FDG(namespace={"np": np, "time": time, "FLOATS": floats})
    fdg.add_fragment("env", "obs = np.zeros(4)", rate="init")
    fdg.add_fragment("env", "time.sleep(0.001)\nobs = obs + 1\nreward = obs.copy()", rate="step")
    fdg.add_fragment("learner", "big = np.ones(FLOATS)", rate="init")
    fdg.add_fragment("learner", "big[0] = float(reward.sum())", rate="iteration")
    policy = resolve_policy("inline", fdg, None)
    plan = make_plan(fdg, policy)
    programs = {g: group_program(plan, g, 3, True, "auto") for g in plan.groups}
    backend = InlineBackend()
    backend.deploy(plan, programs, dict(fdg.namespace), None)
    seen: list[int] = []
    try:
        drive(plan, backend, iterations, lambda record: False,
              on_snapshot=lambda iteration, pickled: seen.append(iteration), **snapshots)
    finally:
        backend.teardown()
    return seen


def test_a_big_state_is_snapshotted_at_multiples_of_a_power_of_two():
    # 64 MB to pickle against a few ms of iteration: far over the 5 % budget on any machine,
    # so the interval goes to 4 iterations or more (MOST on a quick one)
    seen = _snapshotted(8_000_000, snapshot_every=1, snapshot_paced=True)
    assert seen[0] == 1  # the first one measures the cost; the next ones wait for the interval
    assert all(i % 4 == 0 for i in seen[1:]) and len(seen) <= 1 + 24 // 4


def test_a_small_state_is_snapshotted_every_iteration():
    # well over 5 % of these ~4 ms iterations, but small: every iteration, as before
    assert _snapshotted(16, iterations=12, snapshot_every=1, snapshot_paced=True) == list(range(1, 12))


def test_a_slow_small_snapshot_does_not_pace():
    pacer = SnapshotPacer()
    pacer.due(1, now=0.0)
    pacer.due(2, now=0.01)
    pacer.took(0.5, size=150_000)  # a busy machine's outlier: the size decides
    assert pacer.every == 1 and pacer.due(3, now=0.02)


def test_a_big_first_snapshot_waits_for_the_iteration_to_be_timed():
    pacer = SnapshotPacer(budget=0.05)
    assert pacer.due(1, now=0.0)
    pacer.took(0.2, size=BIG_BYTES)
    assert pacer.every == MOST  # not timed yet: no second big snapshot at iteration 2
    assert not pacer.due(2, now=1.2) and pacer.every == 4  # 0.2 s of 1 s iterations


def test_an_explicit_interval_is_kept_whatever_the_cost():
    assert _snapshotted(8_000_000, iterations=12, snapshot_every=2) == list(range(2, 12, 2))


@pytest.mark.parametrize("cost, iteration, every", [(0.019, 0.01, 1), (0.05, 1.0, 1), (0.06, 1.0, 2),
                                                     (0.2, 1.0, 4), (0.3, 1.0, 8), (100.0, 1.0, MOST)])
def test_the_interval_is_the_smallest_power_of_two_within_the_budget(cost, iteration, every):
    pacer = SnapshotPacer(budget=0.05)
    pacer.due(1, now=0.0)
    pacer.due(2, now=iteration)
    pacer.took(cost, size=BIG_BYTES)
    assert pacer.every == every


def test_replicas_with_different_intervals_share_the_largest_ones_iterations():
    fast, slow = SnapshotPacer(), SnapshotPacer()
    fast.every, slow.every = 2, 8
    both = [i for i in range(1, 40) if fast.due(i, now=float(i)) and slow.due(i, now=float(i))]
    assert both == [8, 16, 24, 32]
