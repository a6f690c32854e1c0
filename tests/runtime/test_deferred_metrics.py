"""wb.log of device values (an env's EndedEpisodes here; CuPy arrays and CUDA tensors take
the same path on a GPU): kept until the end of the iteration, read in one go, and the
metric is what logging numbers at once gives — same values, same order — with a NaN still
an error that names the fragment and the cell line that logged it."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.envs.episodes import EndedEpisodes
from workbench.errors import FragmentRuntimeError
from workbench.deferred_metrics import Deferred, is_deferred, read_metric

ENV_STEP = """\
ret = np.arange(4.0) + 10 * replica.iteration + step
ended = (np.arange(4) + step) % 3 == 0
wb.log("before", 1.5)
wb.log("episodes", {what})
wb.log("after", ret[0])
step += 1
reward = np.ones(4)
"""


def _run(what: str, iterations: int = 3):
    fdg = wb.FDG(namespace={"wb": wb, "np": np, "EndedEpisodes": EndedEpisodes})
    fdg.add_fragment("env", "obs = np.zeros((4, 2))\nstep = 0", rate="init")
    fdg.add_fragment("actor", "action = obs[:, 0]", rate="step")
    fdg.add_fragment("env", ENV_STEP.format(what=what), rate="step")
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    return fdg.run(iterations=iterations, steps=5, progress=False)


def test_deferred_values_make_the_metric_immediate_ones_make():
    deferred = _run("EndedEpisodes(ret, ended)")
    immediate = _run("ret[ended]")
    for name in ("before", "episodes", "after"):
        np.testing.assert_array_equal(deferred.metrics[name], immediate.metrics[name])
    assert len(deferred.metrics["episodes"]) == 3


def test_order_within_a_metric_is_kept_across_deferred_and_plain_values():
    values = [
        1.0,
        Deferred(np.array([2.0, 3.0]), False, None),
        4.0,
        Deferred(EndedEpisodes(np.array([5.0, 0.0, 6.0]), np.array([True, False, True])), False, None),
        Deferred(EndedEpisodes(np.array([7.0]), np.array([True])), False, None),
    ]
    assert read_metric("m", values) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_a_nan_names_the_fragment_and_the_line_that_logged_it():
    with pytest.raises(FragmentRuntimeError) as caught:
        _run("EndedEpisodes(np.where(replica.iteration == 1, np.nan, ret), ended)")
    err = caught.value
    assert (err.fragment, err.rate, err.line, err.iteration) == ("env", "step", 4, 1)
    assert "not finite" in str(err) and 'wb.log("episodes"' in str(err)


def test_allow_nan_keeps_the_nan():
    fdg = wb.FDG(namespace={"wb": wb, "np": np, "EndedEpisodes": EndedEpisodes})
    fdg.add_fragment("env", "obs = np.zeros((2, 2))", rate="init")
    fdg.add_fragment("actor", "action = obs[:, 0]", rate="step")
    fdg.add_fragment(
        "env",
        "reward = np.ones(2)\nwb.log('x', EndedEpisodes(np.array([np.nan, 1.0]), np.ones(2, bool)), allow_nan=True)",
        rate="step",
    )
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    run = fdg.run(iterations=1, steps=2, progress=False)
    assert np.isnan(run.metrics["x"][0])


def test_which_values_wait():
    assert is_deferred(EndedEpisodes(np.zeros(1), np.ones(1, bool)))
    assert not is_deferred(np.zeros(3)) and not is_deferred(1.0)
    import torch

    assert not is_deferred(torch.zeros(2))  # a CPU tensor is read at once, as before
    wb.log("outside/a/run", EndedEpisodes(np.zeros(1), np.ones(1, bool)))  # ignored, as numbers are
