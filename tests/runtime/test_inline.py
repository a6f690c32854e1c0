"""The inline policy: the whole loop in this process. Checks interface semantics by value."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import workbench as wb
from tests.conftest import toy_fdg


def _expected_totals(iterations: int, steps: int, envs: np.ndarray) -> list[float]:
    """The toy FDG's learner totals, computed by a plain Python loop."""
    obs, gain, total, out = envs.astype(float), 1.0, 0.0, []
    for _ in range(iterations):
        for _ in range(steps):
            action = obs * gain
            obs = obs + 1
            total += float(action.sum())
        out.append(total)
        gain *= 0.5
    return out


def test_inline_run_matches_a_plain_loop():
    run = toy_fdg().run(iterations=4, steps=3, progress=False)
    assert run.status == "finished"
    assert run.metrics["learner/total"].tolist() == _expected_totals(4, 3, np.arange(3.0))
    assert run.env_steps == 4 * 3 * 3  # T × iterations × envs (the batch of env's arrays)


def test_stacked_values_arrive_as_T_by_batch():
    fdg = toy_fdg()
    fdg.add_fragment("learner", "batch_shape = reward.shape\nwb.log('shape', list(batch_shape))", rate="iteration")
    run = fdg.run(iterations=1, steps=5, progress=False)
    assert run.rows[0]["shape"] == pytest.approx((5 + 3) / 2)  # mean of [5, 3]


def test_stop_from_another_thread_ends_the_run_early():
    fdg = toy_fdg(time=__import__("time"))
    fdg.add_fragment("learner", "time.sleep(0.01)\nscale = 1.0", rate="iteration")
    threading.Timer(0.2, fdg.stop).start()
    run = fdg.run(iterations=10_000, steps=1, progress=False)
    assert run.status == "stopped"
    assert 0 < run.completed_iterations < 10_000


def test_no_threads_survive_a_run():
    toy_fdg().run(iterations=3, steps=2, progress=False)
    assert not [t for t in threading.enumerate() if t.name.startswith("workbench-")]


def test_fragment_error_names_fragment_replica_and_cell_line():
    fdg = toy_fdg()
    fdg.add_fragment("env", "obs = obs + 1\nreward = action.copy()\nboom = 1 / 0", rate="step")
    before = fdg.copy()
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=2, steps=2, progress=False)
    err = info.value
    assert (err.fragment, err.rate, err.replica, err.worker, err.line) == ("env", "step", 0, "local", 3)
    assert "boom = 1 / 0" in str(err) and "ZeroDivisionError" in str(err)
    assert "original traceback" in str(err)
    assert fdg == before and fdg.last_run.status == "failed"
    assert not [t for t in threading.enumerate() if t.name.startswith("workbench-")]


def test_a_run_keeps_torch_and_blas_on_one_thread_and_gives_them_back():
    """Inline replicas share the process's cores: torch's and NumPy's BLAS pools run one
    thread during the run (a 2-thread BLAS pool made the NumPy learner's matmuls 2.5×
    slower on a busy machine) and get their sizes back after it."""
    import torch
    from threadpoolctl import threadpool_info

    blas = lambda: sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"})
    torch.set_num_threads(2)
    before = blas()
    fdg = toy_fdg()
    fdg.namespace.update(torch=torch, blas=blas)
    fdg.add_fragment(
        "env", "obs = obs + 1\nreward = action.copy()\nthreads = (torch.get_num_threads(), blas())", rate="step"
    )
    run = fdg.run(iterations=1, steps=2, progress=False)
    assert run.state.fragments["env"][0]["threads"] == (1, [1] if before else [])
    assert torch.get_num_threads() == 2 and blas() == before


def test_an_error_workbench_raises_inside_a_cell_is_not_blamed_on_the_cell():
    """A cell's own bug: "Fix the cell". A workbench error raised through the cell (a
    process group that could not form, a collective misused): its own advice stands."""
    from workbench.errors import ProcessGroupError

    fdg = toy_fdg()
    fdg.namespace["form_group"] = lambda: (_ for _ in ()).throw(
        ProcessGroupError("the learners' process group did not form; use allreduce='channels'")
    )
    fdg.add_fragment("env", "obs = obs + 1\nreward = action.copy()\nform_group()", rate="step")
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=1, progress=False)
    said = str(info.value)
    assert "Fix the cell" not in said and "Do what the error says" in said and "allreduce='channels'" in said
    fdg.add_fragment("env", "obs = obs + 1\nreward = action.copy()\nboom = 1 / 0", rate="step")
    with pytest.raises(wb.FragmentRuntimeError, match="Fix the cell"):
        fdg.run(iterations=1, steps=1, progress=False)


def test_reading_a_value_the_producer_never_wrote_is_explained():
    fdg = wb.FDG(namespace={})
    fdg.add_fragment("env", "if False:\n    obs = 0", rate="init")  # a first value on paper only
    fdg.add_fragment("actor", "a = obs", rate="step")
    fdg.add_fragment("env", "obs = a", rate="step")
    with pytest.raises(wb.FragmentRuntimeError, match="reads 'obs' from fragment 'env', which has not written it yet"):
        fdg.run(iterations=1, steps=1, progress=False)


def test_undefined_notebook_name_is_caught_before_running():
    fdg = toy_fdg()
    fdg.add_fragment("actor", "action = obs * gain * missing_scale", rate="step")
    with pytest.raises(wb.UndefinedNameError, match="missing_scale"):
        fdg.run(iterations=1, steps=1, progress=False)


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_iterations_must_be_positive_whole_numbers(bad):
    with pytest.raises(wb.RunConfigError, match="iterations"):
        toy_fdg().run(iterations=bad, steps=1, progress=False)


def test_reports_that_arrive_after_every_loop_has_exited_still_count(monkeypatch):
    """On a cluster, reports come over the driver's channel and exits through Dask, so on
    a busy machine every loop's exit can overtake the last reports: the run waits for them
    (``TRAILING_REPORTS_S``) rather than calling itself stalled. Here every report is held
    back until all loops have exited, then let through."""
    import workbench.trainer
    from workbench.runtime.engine.driver import TRAILING_REPORTS_S, Events
    from workbench.runtime.engine.inline import InlineBackend

    class ExitsFirst(Events):
        def __init__(self, inner: Events, loops: int) -> None:
            super().__init__(inner.on_snapshot)
            self.queue, self.held, self.loops = inner.queue, [], loops

        def report(self, task, report) -> None:
            self.held.append((task, report))

        def exit(self, group, replica) -> None:
            super().exit(group, replica)
            self.loops -= 1
            if self.loops == 0:
                threading.Timer(HELD_S, self._release).start()

        def _release(self) -> None:
            for task, report in self.held:
                super().report(task, report)

    class LateReportsBackend(InlineBackend):
        def start(self, plan, stream, events):
            loops = sum(g.replicas for g in plan.groups.values())
            super().start(plan, stream, ExitsFirst(events, loops))

    HELD_S = 0.5
    assert HELD_S < TRAILING_REPORTS_S
    monkeypatch.setattr(workbench.trainer, "InlineBackend", LateReportsBackend)
    run = toy_fdg().run(iterations=4, steps=2, policy="inline", progress=False)
    assert run.status == "finished", run.error
    assert [row["iteration"] for row in run.rows] == [0, 1, 2, 3]


def test_a_kept_state_is_not_trained_by_the_runs_that_resume_from_it():
    # inline replicas restore by reference no more: resuming twice from one run.state (try
    # one change, then another, from the same point) starts both from that point, and the
    # state the user kept stays as it was
    import torch

    from workbench.algorithms import ppo

    fdg = ppo.build_fdg()
    first = fdg.run(iterations=2, steps=16, policy="inline", progress=False)
    kept = {k: v.clone() for k, v in first.state.fragments["learner"][0]["agent"].state_dict().items()}
    runs = [fdg.run(iterations=2, steps=16, policy="inline", progress=False, resume=first.state) for _ in range(2)]
    after = first.state.fragments["learner"][0]["agent"].state_dict()
    assert all(torch.equal(kept[k], after[k]) for k in kept)
    one, two = (r.state.fragments["learner"][0]["agent"].state_dict() for r in runs)
    assert all(torch.equal(one[k], two[k]) for k in one) and not all(torch.equal(one[k], kept[k]) for k in one)
