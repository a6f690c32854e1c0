"""A long iteration is not a stalled run; a stuck cell still is (issue 27 item 6).

The stall deadline is made small here (``STALL_TIMEOUT_S``, 1 s) rather than waited for:
an iteration that legitimately takes several deadlines — by stepping slowly, or by
computing in one long cell — finishes, inline and on a LocalCluster; a cell that waits for
what never comes is reported as a stall naming it, as before. Durations here are the
FDGs' own (the deadline is a mechanism's parameter); wall-clock bounds are hang guards.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import workbench as wb
import workbench.cluster.backend
import workbench.runtime.engine.driver
from workbench.runtime.process.stall import STALL_FACTOR

DEADLINE_S = 1.0

#: many short steps: no report for several deadlines, but every step is progress
SLOW_STEPS = "time.sleep(0.05)\nobs = obs + 1\nreward = np.ones(2)"
#: one cell that computes for several deadlines (a learner's update over a huge batch)
LONG_UPDATE = """\
began = time.monotonic()
while time.monotonic() - began < seconds:
    a = a @ b / 8.0 + 1.0
total += float(reward.sum())
"""
#: a cell that waits for what never comes (until the test lets it go)
STUCK_STEP = """\
seen += 1
if seen > 2:
    while not os.path.exists(release):
        time.sleep(0.05)
reward = np.ones(2)
"""


@pytest.fixture
def short_deadline(monkeypatch):
    monkeypatch.setattr(workbench.runtime.engine.driver, "STALL_TIMEOUT_S", DEADLINE_S)
    # a stuck loop's teardown need not wait the whole grace here
    monkeypatch.setattr(workbench.runtime.engine.driver, "STOP_GRACE_S", 2.0)
    monkeypatch.setattr(workbench.cluster.backend, "STOP_GRACE_S", 2.0)


def _fdg(step: str, learner: str, **names) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "time": time, "os": os, **names})
    fdg.add_fragment("env", "obs = np.zeros(2)\nseen = 0", rate="init")
    fdg.add_fragment("env", step, rate="step")
    fdg.add_fragment("learner", "total = 0.0\na = np.ones((64, 64)) / 64\nb = np.eye(64)", rate="init")
    fdg.add_fragment("learner", learner, rate="iteration")
    return fdg


def _kwargs(policy, client) -> dict:
    return {"policy": policy, "progress": False, **({"cluster": client} if policy != "inline" else {})}


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_an_iteration_of_slow_steps_longer_than_the_deadline_finishes(policy, client, short_deadline):
    # 40 steps of 50 ms: 2 s between reports, twice the deadline, in every iteration
    run = _fdg(SLOW_STEPS, "total += float(reward.sum())").run(iterations=2, steps=40, **_kwargs(policy, client))
    assert run.status == "finished" and run.completed_iterations == 2


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_cell_computing_longer_than_the_deadline_finishes(policy, client, short_deadline):
    # the first update computes for 4 deadlines (no report, no step meanwhile): its CPU is
    # its progress; the second is shorter than the deadline that grew with the first
    seconds = 4 * DEADLINE_S
    run = _fdg("obs = obs + 1\nreward = np.ones(2)", LONG_UPDATE, seconds=seconds).run(
        iterations=2, steps=2, **_kwargs(policy, client)
    )
    assert run.status == "finished" and run.completed_iterations == 2


@pytest.fixture
def release(tmp_path):
    """A path whose existence lets a stuck cell return: created at the end, so no thread
    of this process (or loop on a worker) outlives the test."""
    path = tmp_path / "release"
    yield str(path)
    path.write_text("")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(t.name.startswith("workbench-") for t in threading.enumerate()):
        time.sleep(0.1)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_stuck_cell_is_still_a_stall_that_names_it(policy, client, short_deadline, release):
    fdg = _fdg(STUCK_STEP, "total += float(reward.sum())", release=release)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="the run stalled at iteration 1") as caught:
        # own_random off: the learner beside the stuck env replica does not first wait the
        # turn's patience (1 s, as long as this deadline) to run its iteration 0
        fdg.run(iterations=5, steps=2, own_random=False, **_kwargs(policy, client))
    text = str(caught.value)
    assert "loops are still alive" in text and "none of them stepped or computed" in text
    assert "the env step cell (replica 0 of env" in text and "has not returned" in text
    assert time.monotonic() - began < 60  # a hang guard: the deadline is 1 s


def test_the_deadline_grows_with_the_longest_iteration():
    from workbench.runtime.process.stall import Watchdog

    dog = Watchdog(1.0, None, now=0.0)
    dog.iteration_done(0.2)
    assert dog.deadline == 1.0  # short iterations: the timeout
    dog.heard(10.2)
    dog.iteration_done(10.2)  # a 10 s iteration
    assert dog.deadline == pytest.approx(STALL_FACTOR * 10.0)
    # silence alone decides here (no activity to read): stalled only past the grown deadline
    assert dog.stalled(10.2 + 25.0) is None and dog.stalled(10.2 + STALL_FACTOR * 10.0 + 0.1) == ""


def test_progress_that_can_never_be_read_leaves_silence_to_decide():
    """A backend whose replicas cannot be asked (activity() None every time) is judged by its
    silence alone; it was never called stalled (each read at half the deadline returned)."""
    from workbench.runtime.process.stall import Watchdog

    dog = Watchdog(1.0, lambda: None, now=0.0)
    assert dog.stalled(0.6) is None  # half the deadline: a read, nothing known
    assert dog.stalled(0.9) is None
    assert dog.stalled(1.1) == ""
