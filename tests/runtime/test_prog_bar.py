"""``wb.log(…, prog_bar=True)``: the metric's newest value reaches the progress bar and the
summary from wherever its cell runs (this process, a worker), ``charts/`` ones first; a
run without episodes shows them instead of an empty return."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.progress import progress_text

ITERATIONS = 5


def logging_loop(episodes_from: int | None = None) -> wb.FDG:
    """An actor that logs a prog_bar metric every step; a learner that logs one every
    iteration, one every third, one without prog_bar, and (from ``episodes_from`` updates
    on) episode returns."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "episodes_from": episodes_from})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment(
        "actor", "action = obs + 1\nwb.log('perf/actions_per_call', float(action.size), prog_bar=True)", rate="step"
    )
    fdg.add_fragment("env", "obs = action * 0.5\nreward = action.copy()", rate="step")
    fdg.add_fragment("learner", "updates = 0", rate="init")
    fdg.add_fragment(
        "learner",
        """\
updates += 1
wb.log('charts/updates', updates, prog_bar=True)
wb.log('losses/quiet', 1.0)
if updates % 3 == 0:
    wb.log('charts/every_third', updates * 10, prog_bar=True)
if episodes_from is not None and updates >= episodes_from:
    wb.log('charts/episodic_return', float(100 + updates))
""",
        rate="iteration",
    )
    return fdg


@pytest.mark.parametrize("where", ["inline", "coarse"])
def test_prog_bar_metrics_reach_the_progress_and_the_summary_from_any_process(client, where):
    run = logging_loop().run(
        iterations=ITERATIONS, steps=2, policy=where, progress=False, cluster=client if where != "inline" else None
    )
    assert run.status == "finished", run.error
    # charts/ first, each kind in the order first logged (the actor logs before the learner)
    assert run.shown_metrics == ["charts/updates", "charts/every_third", "perf/actions_per_call"]
    # the newest value of each, also one logged iterations ago; not the one without prog_bar
    assert run.headline() == [("charts/updates", 5.0), ("charts/every_third", 30.0), ("perf/actions_per_call", 2.0)]
    text = progress_text(run)
    assert text.endswith("env-steps/s · updates 5 · every_third 30 · actions_per_call 2")
    assert "return" not in text and "quiet" not in text  # no episodes: no empty return
    assert run.summary().endswith("; updates 5 · every_third 30 · actions_per_call 2")
    assert "mean return" not in run.summary()


def test_a_run_with_episodes_shows_the_return_and_the_prog_bar_metrics():
    run = logging_loop(episodes_from=1).run(iterations=ITERATIONS, steps=2, progress=False)
    assert progress_text(run).endswith("env-steps/s · return 103 · updates 5 · every_third 30 · actions_per_call 2")
    assert "mean return of the last 20 episodes 103.0; updates 5" in run.summary()


def test_without_prog_bar_the_progress_is_as_it_was():
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = action * 0.5\nreward = action.copy()", rate="step")
    fdg.add_fragment("learner", "wb.log('charts/loss', 1.0)", rate="iteration")
    run = fdg.run(iterations=2, steps=2, progress=False)
    assert run.shown_metrics == [] and run.headline() == []
    assert progress_text(run).endswith("env-steps/s · return –")
    assert run.summary().endswith("mean return of the last 20 episodes n/a")
