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
from workbench.runtime.engine.driver import drive
from workbench.runtime.engine.inline import InlineBackend
from workbench.runtime.replicas.replica import group_program
from workbench.runtime.state.snapshot_pacing import BIG_BYTES, MOST, SMALL_MOST, SnapshotPacer


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
        drive(
            plan,
            backend,
            iterations,
            lambda record: False,
            on_snapshot=lambda iteration, pickled: seen.append(iteration),
            **snapshots,
        )
    finally:
        backend.teardown()
    return seen


def test_a_big_state_is_not_snapshotted_blind_in_a_short_run_of_quick_iterations():
    # 64 MB against iterations of a few ms: costed from its size before any pickling, the
    # interval is hundreds of iterations, so 24 of them take no snapshot (it was one at
    # iteration 1, taken to find the cost, and one at 32: 12 s of a 28 s GRPO run on a GPU)
    assert _snapshotted(8_000_000, snapshot_every=1, snapshot_paced=True) == []


def test_a_small_state_is_snapshotted_every_iteration():
    # well over 5 % of these ~4 ms iterations, but small: every iteration, as before
    assert _snapshotted(16, iterations=12, snapshot_every=1, snapshot_paced=True) == list(range(1, 12))


def test_a_slow_small_snapshot_does_not_pace():
    pacer = SnapshotPacer()
    pacer.due(1, now=0.0)
    pacer.due(2, now=0.01)
    pacer.took(0.5, size=150_000)  # a busy machine's outlier: the size decides
    assert pacer.every == 1 and pacer.due(3, now=0.02)


def _small_pacing(cost: float, iteration: float = 0.03, snapshots: int = 6, size: int = 2_000_000) -> list[int]:
    """The intervals after each of ``snapshots`` small snapshots of ``cost`` seconds, with
    iterations of ``iteration`` seconds."""
    pacer, now, out, i = SnapshotPacer(), 0.0, [], 0
    while len(out) < snapshots:
        i += 1
        now += iteration
        if pacer.due(i, now=now):
            pacer.took(cost, size=size)
            now += cost
            out.append(pacer.every)
    return out


def test_a_small_snapshot_that_keeps_costing_a_share_of_the_iteration_paces():
    # a GRPO learner: 2 MB, ~6 ms to pickle its model object, 30 ms iterations: 20 % of each,
    # so after three timed snapshots every 4th (6 / (0.05 × 30) = 4)
    assert _small_pacing(0.006) == [1, 1, 4, 4, 4, 4]
    # however costly, a small state is snapshotted within SMALL_MOST iterations
    assert _small_pacing(0.5)[-1] == SMALL_MOST
    # a PPO learner's ~1 ms snapshots stay every iteration, whatever the share
    assert _small_pacing(0.001, iteration=0.004) == [1] * 6
    # and its 150 KB are never paced, however slow a busy machine makes them
    assert _small_pacing(0.05, size=150_000) == [1] * 6


def test_one_busy_moment_among_quick_small_snapshots_does_not_pace():
    pacer = SnapshotPacer()
    for i, cost in enumerate([0.0005, 0.3, 0.0005, 0.0005, 0.4], start=1):
        pacer.due(i, now=i * 0.03)
        pacer.took(cost, size=150_000)
        assert pacer.every == 1


def test_a_big_first_snapshot_waits_for_the_iteration_to_be_timed():
    pacer = SnapshotPacer(budget=0.05)
    assert pacer.due(1, now=0.0)
    pacer.took(0.2, size=BIG_BYTES)
    assert pacer.every == MOST  # not timed yet: no second big snapshot at iteration 2
    assert not pacer.due(2, now=1.2) and pacer.every == 4  # 0.2 s of 1 s iterations


def test_an_explicit_interval_is_kept_whatever_the_cost():
    assert _snapshotted(8_000_000, iterations=12, snapshot_every=2) == list(range(2, 12, 2))


@pytest.mark.parametrize(
    "cost, iteration, every",
    [
        (0.019, 0.01, 1),
        (0.05, 1.0, 1),
        (0.06, 1.0, 2),
        (0.2, 1.0, 4),
        (0.3, 1.0, 8),
        (100.0, 1.0, 2048),
        (1000.0, 1.0, MOST),
    ],
)
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


def test_a_costed_state_waits_for_a_timed_iteration_then_takes_its_measured_cost():
    pacer = SnapshotPacer(budget=0.05, estimate=lambda: 200 * 2**20)  # ~0.21 s at the assumed rate
    assert not pacer.due(1, now=0.0) and pacer.every == MOST  # no iteration timed yet
    assert not pacer.due(2, now=1.0) and pacer.every == 8  # 1 s iterations: 0.21 ≤ 0.05 × 8
    assert [i for i in range(3, 17) if pacer.due(i, now=float(i - 1))] == [8, 16]
    pacer.took(0.9, size=200 * 2**20)  # slower than assumed: the measurement decides
    assert not pacer.due(17, now=16.9) and pacer.every == 32


def test_a_small_or_unknown_estimate_leaves_the_pacer_as_without_one():
    for estimate in (lambda: 150_000, lambda: None):
        pacer = SnapshotPacer(estimate=estimate)
        assert pacer.due(1, now=0.0) and pacer.every == 1


def test_the_driver_keeps_the_snapshots_a_long_interval_needs():
    # a replica snapshotting every iteration beside one at multiples of 128: the book still
    # holds the first's snapshot of iteration 128 when the second's arrives 72 later
    from workbench.runtime.state.snapshots import SnapshotBook, snapshot_key

    book = SnapshotBook({"actor": 1, "learner": 1})
    for i in range(1, 201):
        book.put(snapshot_key("actor"), i, 0, b"a")
        if i % 128 == 0:
            book.put(snapshot_key("learner"), i, 0, b"l")
    assert book.latest()[0] == 128
    assert len(book._versions[("actor", 0)]) <= book.keep + MOST.bit_length()


def test_the_size_estimate_is_what_the_snapshot_pickles():
    import torch

    from workbench.runtime.transport.channels import dumps_state
    from workbench.runtime.state.state_size import state_nbytes

    model = torch.nn.Sequential(torch.nn.Linear(300, 400), torch.nn.Linear(400, 5))
    state = {
        "learner": {
            "model": model,
            "optimizer": torch.optim.Adam(model.parameters()),
            "buffer": np.zeros((200, 50)),
            "note": "x" * 1000,
            "count": 3,
        }
    }
    state["learner"]["optimizer"].zero_grad()
    model(torch.ones(2, 300)).sum().backward()
    state["learner"]["optimizer"].step()
    pickled = len(dumps_state(state))
    assert abs(state_nbytes(state) - pickled) < 0.02 * pickled


def test_a_state_dict_beside_its_model_is_pickled_once_and_shares_memory_again():
    import pickle

    import torch

    from workbench.runtime.transport.channels import dumps_state
    from workbench.runtime.state.state_size import state_nbytes

    model = torch.nn.Linear(500, 400)
    alone = len(dumps_state({"model": model}))
    both = {"model": model, "weights": model.state_dict(), "rows": model.weight[1:], "t": model.weight.t()}
    pickled = dumps_state(both)
    views = 2 * model.weight.nelement() * 4  # the slice and the transpose are other views: written
    assert len(pickled) < alone + views + 10_000 and abs(state_nbytes(both) - len(pickled)) < 10_000
    back = pickle.loads(pickled)
    assert back["weights"]["weight"].data_ptr() == back["model"].weight.data_ptr()
    back["model"].weight.data.add_(1.0)  # the restored pair aliases, as the original did
    assert torch.equal(back["weights"]["weight"], back["model"].weight.detach())
    assert torch.equal(back["rows"], model.weight[1:].detach()) and torch.equal(back["t"], model.weight.t().detach())
