"""An inline run's envs across live changes: a change ends a stretch at an iteration
boundary and the next stretch steps the same envs (its state is carried in memory), so a
stretch's end must not close them; they are closed once, when the run ends.

Before, inline's teardown closed every env at the end of each stretch: an EnvPool env
(which does not pickle, so the next stretch got the very object) then failed at the
boundary with ``'NoneType' object has no attribute 'send'``, and a gymnasium one was
stepped after ``close()``.
"""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import numpy as np
import pytest

import workbench as wb
from tests.live.test_live_changes import At

ITERATIONS = 12
STEP = (
    "time.sleep(0.002)  # the driver hears of each iteration while the replicas are one ahead\n"
    "obs, reward, terminated, truncated, info = envs.step(action)"
)


class _Env:
    """A 2-env vector env that fails loudly once closed (as EnvPool's does), counting its
    steps and closes. ``Unpicklable`` ones are handed to the next stretch by reference."""

    made: ClassVar[list] = []

    def __init__(self) -> None:
        self.steps, self.closes, self.steps_at_close = 0, 0, None
        self.stepped = False  # this very object (a pickled copy starts unstepped)
        type(self).made.append(self)

    def __setstate__(self, state) -> None:  # a pickled copy is an env of the run too
        self.__dict__.update(state, stepped=False)
        type(self).made.append(self)

    def reset(self):
        return np.zeros((2, 2))

    def step(self, action):
        if self.closes:
            raise RuntimeError("stepped after close()")
        self.steps += 1
        self.stepped = True
        return np.full((2, 2), float(self.steps)), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}

    def close(self) -> None:
        self.closes += 1
        self.steps_at_close = self.steps


class _Unpicklable(_Env):
    def __getstate__(self):
        raise TypeError("its envs live in native threads")


def _fdg(env_class) -> wb.FDG:
    env_class.made = []
    fdg = wb.FDG(namespace={"np": np, "time": time, "Env": env_class, "scale": 1.0})
    fdg.add_fragment("env", "envs = Env()\nobs = envs.reset()", rate="init")
    fdg.add_fragment("actor", "action = np.zeros(len(obs), np.int64)", rate="step")
    fdg.add_fragment("env", STEP, rate="step")
    fdg.add_fragment("learner", "total = 0.0", rate="init")
    fdg.add_fragment("learner", "total += float(reward.sum()) * scale", rate="iteration")
    return fdg


def _check_closed_once_at_the_end(env_class) -> None:
    """Every env the run stepped was closed exactly once, and only after its last step."""
    stepped = [env for env in env_class.made if env.stepped]
    assert stepped
    assert [env.closes for env in stepped] == [1] * len(stepped)
    assert [env.steps_at_close for env in stepped] == [env.steps for env in stepped]


class _Changes:
    """A run logger making live changes as iterations are recorded: a re-run step cell at
    2 and an ``fdg.update`` at 6, each ending a stretch at the next boundary."""

    def __init__(self, fdg: wb.FDG, env_class) -> None:
        self.fdg, self.env_class, self.open_at_change = fdg, env_class, []

    def log(self, row: dict) -> None:
        if row["iteration"] in (2, 6):
            self.open_at_change.append(not any(e.closes for e in self.env_class.made))
        if row["iteration"] == 2:
            self.fdg.add_fragment("env", STEP + "\nstepped = True", rate="step")
        elif row["iteration"] == 6:
            self.fdg.update(scale=2.0)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("env_class", [_Unpicklable, _Env], ids=["by-reference", "pickled"])
@pytest.mark.parametrize("keep_state", [False, True])
def test_live_changes_keep_the_envs_open_and_the_run_closes_them_once(env_class, keep_state):
    """keep_state=True: the last stretch hands its state on too (to run.state), and its
    envs are still closed when the run ends."""
    fdg = _fdg(env_class)
    changes = _Changes(fdg, env_class)
    run = fdg.run(
        iterations=ITERATIONS, steps=3, policy="inline", progress=False, loggers=[changes], keep_state=keep_state
    )
    assert run.status == "finished" and run.error is None, run.error
    assert run.completed_iterations == ITERATIONS
    assert sorted(e.kind for e in run.events) == ["edited", "updated"], run.events  # three stretches
    if env_class is _Unpicklable:  # one env, stepped by all three stretches, open throughout
        assert len(env_class.made) == 1 and env_class.made[0].steps == ITERATIONS * 3
        assert changes.open_at_change == [True, True]
    _check_closed_once_at_the_end(env_class)


def test_a_stopped_background_run_closes_its_envs_once_after_a_change():
    """As ``%fdg run --background`` and a re-run cell: the run in a thread, the change from
    the notebook's, then ``%fdg stop``."""
    fdg = _fdg(_Unpicklable)
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(run=fdg.run(iterations=100_000, steps=3, policy="inline", progress=False))
    )
    thread.start()
    try:
        _wait(lambda: fdg.last_run is not None and fdg.last_run.completed_iterations >= 2)
        fdg.add_fragment("env", STEP + "\nstepped = True", rate="step")
        _wait(lambda: any(e.kind == "edited" for e in fdg.last_run.events))
        edited_at = next(e.iteration for e in fdg.last_run.events if e.kind == "edited")
        _wait(lambda: fdg.last_run.completed_iterations > edited_at + 2)  # the next stretch steps on
        assert not _Unpicklable.made[0].closes
    finally:
        fdg.stop()
        thread.join(60)
    run = result["run"]
    assert run.status == "stopped" and run.error is None, run.error
    assert len(_Unpicklable.made) == 1
    _check_closed_once_at_the_end(_Unpicklable)


def test_an_env_a_re_run_init_cell_builds_is_closed_and_the_kept_one_once_at_the_end():
    """The edited init cell builds a new env, but the fragment keeps its trained one: the
    new one is closed at once, the kept one (carried on) only when the run ends."""
    fdg = _fdg(_Unpicklable)
    edit = At(2, lambda: fdg.add_fragment("env", "envs = Env()\nobs = envs.reset()\nmarker = 1", rate="init"))
    run = fdg.run(iterations=ITERATIONS, steps=3, policy="inline", progress=False, loggers=[edit])
    assert run.status == "finished" and run.error is None, run.error
    kept, fresh = _Unpicklable.made
    assert fresh.steps == 0 and fresh.closes == 1
    assert kept.steps == ITERATIONS * 3 and kept.closes == 1


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
