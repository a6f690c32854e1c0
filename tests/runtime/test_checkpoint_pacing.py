"""Checkpoints while a run trains when it was given ``checkpoint_dir`` and no
``checkpoint_every``: every 5–10 s of training, whatever the planned length.

A 400-iteration quickstart run wrote nothing to its checkpoint directory until it ended
(``checkpoint_every`` had no default, so only the final checkpoint was written), while a
30-iteration one ended, and so wrote its checkpoint, within seconds. The pacer's decisions are
pure functions of the iterations' times (given here as ``now``), and the run tests give each
replica a clock of its own, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.fdg.policy import Group, Policy
from workbench.fdg.vocabulary import IN_PROCESS
from workbench.runtime.state import snapshot_pacing
from workbench.runtime.state.checkpoint import load_checkpoint
from workbench.runtime.state.checkpoint_writer import CheckpointWriter
from workbench.runtime.state.snapshot_pacing import (
    CHECKPOINT_PERIOD_S,
    CHECKPOINT_TIMED,
    MOST,
    PACED,
    CheckpointPacer,
)
from workbench.runtime.state.snapshots import SnapshotBook, snapshot_key


def _due(pacer: CheckpointPacer, iteration_s, iterations: int, cost: float = 0.001) -> list[int]:
    """The iterations ``pacer`` takes a full snapshot at, entering one every
    ``iteration_s(i)`` seconds, each snapshot taking ``cost``."""
    now, due = 0.0, []
    for i in range(1, iterations + 1):
        now += iteration_s(i) if callable(iteration_s) else iteration_s
        if pacer.due(i, now=now):
            due.append(i)
            pacer.took(cost)
            now += cost
    return due


# -- the rule ---------------------------------------------------------------------------------
@pytest.mark.parametrize("iteration_s", [0.004, 0.03, 0.2, 1.0, 3.0])
def test_a_checkpoint_comes_every_half_to_whole_period_at_any_iteration_time(iteration_s):
    due = _due(CheckpointPacer(), iteration_s, iterations=int(5 * CHECKPOINT_PERIOD_S / iteration_s))
    gaps = {b - a for a, b in pairwise(due)}
    assert len(gaps) == 1, due  # one interval, kept
    (every,) = gaps
    assert every & (every - 1) == 0  # a power of two: replicas that chose alone still meet
    assert CHECKPOINT_PERIOD_S / 2 < every * iteration_s <= CHECKPOINT_PERIOD_S
    # the first as soon as the later ones: at the interval's first multiple once timed
    assert due[0] == every * -(-(CHECKPOINT_TIMED + 1) // every)


def test_iterations_longer_than_the_period_checkpoint_every_one():
    assert _due(CheckpointPacer(), 2 * CHECKPOINT_PERIOD_S, iterations=6) == [4, 5, 6]


def test_quick_iterations_are_capped_at_the_longest_interval_the_driver_keeps():
    pacer = CheckpointPacer()
    _due(pacer, 1e-5, iterations=10)
    assert pacer.every == MOST


def test_nothing_is_due_before_the_iterations_are_timed():
    # the first iterations (deploy, warm-up) are no measure: none is due before they are timed
    pacer = CheckpointPacer()
    assert [pacer.due(i, now=100.0 * i) for i in range(1, CHECKPOINT_TIMED + 1)] == [False] * CHECKPOINT_TIMED
    assert pacer.every is None
    assert pacer.due(CHECKPOINT_TIMED + 1, now=100.0 * (CHECKPOINT_TIMED + 1))  # 100 s each: every one


def test_one_slow_first_iteration_decides_nothing():
    # a first iteration of 5 s (torch's first use) among 30 ms ones: the median decides
    pacer = CheckpointPacer()
    _due(pacer, lambda i: 5.0 if i == 2 else 0.03, iterations=6)
    assert pacer.every == 256  # 256 × 30 ms = 7.7 s


def test_a_big_state_keeps_its_checkpoints_to_the_budget():
    # 2 s to snapshot against 30 ms iterations: 5 % of the time needs k ≥ 1334, so 2048
    assert _due(CheckpointPacer(), 0.03, iterations=5000, cost=2.0) == [256, 2048, 4096]
    # costed from its size before any is taken: 1 GiB at ~1 GB/s is never taken blind at 256
    costed = CheckpointPacer(estimate=lambda: 1 << 30)
    assert _due(costed, 0.03, iterations=2100, cost=1.1)[0] == 1024


def test_noise_around_a_threshold_never_flips_the_interval():
    # 256 × 39 ms = 9.98 s, 256 × 40.5 ms = 10.4 s: the rule alone flips between 256 and 128
    # as the median does; the slack keeps the first choice
    pacer, now = CheckpointPacer(), 0.0
    chosen = set()
    for i in range(1, 2000):
        now += 0.039 if i % 2 else 0.0405
        pacer.due(i, now=now)
        chosen.add(pacer.every)
    assert len(chosen - {None}) == 1


def test_replicas_whose_clocks_differ_meet_at_the_larger_interval():
    fast, slow = CheckpointPacer(), CheckpointPacer()
    both = [
        i for i in range(1, 600) if fast.due(i, now=0.02 * i) & slow.due(i, now=0.05 * i)
    ]  # & : both are told each iteration
    assert (fast.every, slow.every) == (256, 128)
    assert both == [256, 512]


def test_the_planned_length_plays_no_part():
    # the pacer is never told the run's length: a run that plans 400 iterations and one that
    # plans 100,000 are the same replica loop up to the iteration either stops at
    import inspect

    assert "iterations" not in inspect.signature(CheckpointPacer).parameters
    assert CheckpointWriter(None, "ckpt", None).every == PACED  # a directory alone: paced
    assert CheckpointWriter(None, "ckpt", 20).every == 20  # as given
    assert CheckpointWriter(None, None, None).every == 0  # none without a directory


# -- the driver writes a checkpoint only from full snapshots of every replica -----------------
def test_the_book_says_whether_every_snapshot_of_an_iteration_was_full():
    seen = []
    book = SnapshotBook({"env": 1, "learner": 1}, on_complete=lambda i, s: seen.append((i, s.full)))
    book.put(snapshot_key("env", full=True), 8, 0, b"e")  # env: every 8th
    book.put(snapshot_key("learner"), 8, 0, b"l")  # learner: its light one
    book.put(snapshot_key("learner", full=True), 16, 0, b"L")
    book.put(snapshot_key("env", full=True), 16, 0, b"E")
    book.put(snapshot_key("env"), 17, 0, b"e")
    book.put(snapshot_key("learner"), 17, 0, b"l")
    assert seen == [(8, False), (16, True), (17, False)]


# -- whole runs ---------------------------------------------------------------------------------
def _fdg() -> wb.FDG:
    """An env stepping a counter and a learner summing its rewards; the env reads the
    learner's ``scale`` each iteration, so neither runs far ahead of the other."""
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "rng = np.random.default_rng(0)\nobs = np.zeros(3)", rate="init")
    fdg.add_fragment("env", "obs = obs + scale * rng.normal(size=3)\nreward = obs.sum()", rate="step")
    fdg.add_fragment("learner", "total = 0.0\nscale = 1.0", rate="init")
    fdg.add_fragment("learner", "total += float(np.sum(reward))\nscale = 1.0", rate="iteration")
    return fdg


#: env and learner as two replicas of their own, in this process: each paces alone
APART = Policy("apart", (Group(("env",), 1, (IN_PROCESS,)), Group(("learner",), 1, (IN_PROCESS,))))


class _ReplicaClocks:
    """Stands in for the pacing module's ``time``: each replica's thread sees its own
    iterations take ``seconds(thread name)``, whatever the machine's load."""

    def __init__(self, seconds) -> None:
        self.seconds, self._local = seconds, threading.local()

    def perf_counter(self) -> float:
        self._local.now = getattr(self._local, "now", 0.0) + self.seconds(threading.current_thread().name)
        return self._local.now


class _StopAt:
    """A run's logger that stops the run once it has recorded ``iteration``."""

    def __init__(self, fdg: wb.FDG, iteration: int) -> None:
        self.fdg, self.iteration = fdg, iteration

    def log(self, row) -> None:
        if row["iteration"] >= self.iteration:
            self.fdg.stop()

    def close(self) -> None:
        pass


def _iterations(run) -> list[int]:
    return [int(Path(p).name.split("-")[1]) for p in run.checkpoints]


@pytest.fixture
def seconds_per_iteration(monkeypatch):
    """Give the replicas' pacers clocks of their own (``set(seconds)``), and no budget to
    keep to: these tests are about the period, and a busy machine's slow snapshot must not
    widen the interval."""
    monkeypatch.setattr(snapshot_pacing, "BUDGET", float("inf"))
    return lambda seconds: monkeypatch.setattr(snapshot_pacing, "time", _ReplicaClocks(seconds))


@pytest.mark.parametrize("planned", [41, 100_000])
def test_a_run_given_only_a_directory_checkpoints_every_period_whatever_its_planned_length(
    planned, tmp_path, seconds_per_iteration
):
    # iterations of 1 s: a checkpoint every 8 (8 s), the first at 8 — in a run planned for
    # 41 iterations as in one planned for 100,000 and stopped at 40 (it wrote only its final
    # checkpoint, at the end, before checkpoints were paced)
    seconds_per_iteration(lambda thread: 1.0)
    fdg = _fdg()
    stop = [] if planned == 41 else [_StopAt(fdg, 40)]
    run = fdg.run(iterations=planned, steps=2, progress=False, checkpoint_dir=str(tmp_path), loggers=stop)
    *periodic, final = _iterations(run)
    assert periodic[:5] == [8, 16, 24, 32, 40]
    assert all(i % 8 == 0 for i in periodic) and final >= 41
    assert run.status == ("finished" if planned == 41 else "stopped")


def test_replicas_pacing_apart_checkpoint_where_both_sent_their_whole_state(tmp_path, seconds_per_iteration):
    # the env's iterations take 1 s by its clock (every 8th), the learner's 0.5 s (every
    # 16th): the env's full snapshots at 8, 24, … meet the learner's light ones, and no
    # checkpoint is written from those (it would hold no env state)
    seconds_per_iteration(lambda thread: 1.0 if "-env-" in thread else 0.5)
    fdg = _fdg()
    run = fdg.run(
        iterations=100_000,
        steps=2,
        policy=APART,
        progress=False,
        checkpoint_dir=str(tmp_path),
        loggers=[_StopAt(fdg, 40)],
    )
    *periodic, _final = _iterations(run)
    assert periodic[:2] == [16, 32] and all(i % 16 == 0 for i in periodic)
    ckpt = load_checkpoint(tmp_path / "iteration-000032")
    assert set(ckpt.state.fragments) == {"env", "learner"}  # the env's state, and the learner's
    assert "rng" in ckpt.state.fragments["env"][0]


def test_an_explicit_interval_is_kept_as_given(tmp_path, seconds_per_iteration):
    seconds_per_iteration(lambda thread: 1.0)
    run = _fdg().run(iterations=13, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=3)
    assert _iterations(run) == [3, 6, 9, 12, 13]
