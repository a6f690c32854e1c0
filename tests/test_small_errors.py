"""Small errors an outside tester met: NumPy whole numbers as run arguments, NaN advice that
fits the metric, and a new fragment registered while a run trains."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from tests.conftest import toy_fdg
from workbench.config import RunConfig
from workbench.errors import MetricError, RunConfigError
from workbench.fdg.errors import PlacementError
from workbench.fdg.policy import Inline
from workbench.metric_values import advice_for

DIVERGED = "usually means training diverged"


# -- 2. run arguments: any whole number, as an int ---------------------------------------


def test_numpy_whole_numbers_are_run_arguments_and_become_ints():
    config = RunConfig(
        iterations=np.int64(19),
        steps=np.int32(16),
        checkpoint_every=np.uint8(2),
        checkpoint_dir="unused",
        snapshot_every=np.int64(0),
        target_return=np.float32(1.5),
    )
    assert (config.iterations, config.steps, config.checkpoint_every, config.snapshot_every) == (19, 16, 2, 0)
    assert all(type(v) is int for v in (config.iterations, config.steps, config.checkpoint_every))
    assert type(config.target_return) is float and config.target_return == 1.5


def test_a_run_takes_iterations_computed_with_numpy():
    budget = np.int64(48) // np.int64(8)  # an env-step budget → iterations: np.int64(6)
    run = toy_fdg().run(iterations=budget // 3, steps=np.int64(4), progress=False)
    assert run.status == "finished" and run.completed_iterations == 2 and len(run.rows) == 2


@pytest.mark.parametrize("value", [2.0, np.float64(2.0), True, np.bool_(True), -1, np.int64(0), "2"])
def test_what_is_not_a_whole_number_of_at_least_one_is_still_refused(value):
    with pytest.raises(RunConfigError, match="--iterations must be a whole number ≥ 1"):
        RunConfig(iterations=value)
    with pytest.raises(RunConfigError, match="--steps must be a whole number ≥ 1"):
        RunConfig(steps=value)


def test_target_return_refuses_bools_and_non_finite_numbers():
    for value in (True, np.bool_(False), float("nan"), np.float32("inf"), "high"):
        with pytest.raises(RunConfigError, match="--target-return must be a finite number"):
            RunConfig(target_return=value)


# -- 3. NaN advice that fits the metric ---------------------------------------------------


@pytest.mark.parametrize(
    "name", ["losses/loss", "losses/value_loss", "losses/approx_kl", "charts/grad_norm", "charts/q_values"]
)
def test_a_nan_in_a_training_quantity_gets_the_divergence_advice(name):
    with pytest.raises(MetricError) as info:
        wb.log(name, float("nan"))
    assert DIVERGED in str(info.value) and "lower the learning rate" in str(info.value)


@pytest.mark.parametrize("name", ["charts/episodic_return", "rollout/reward", "charts/episodic_length", "eval/returns"])
def test_a_nan_return_or_reward_points_at_the_env_and_the_reward(name):
    with pytest.raises(MetricError) as info:
        wb.log(name, np.array([1.0, np.nan]))
    text = str(info.value)
    assert DIVERGED not in text and "learning rate" not in text
    assert "environment or the reward computation" in text and "np.mean of an empty array" in text
    assert f"wb.log({name!r}, value, allow_nan=True)" in text


@pytest.mark.parametrize("name", ["charts/SPS", "custom/thing", "eval/temperature"])
def test_a_nan_in_any_other_metric_gets_neutral_advice(name):
    assert DIVERGED not in advice_for(name) and "environment" not in advice_for(name)
    with pytest.raises(MetricError, match="Check the computation that produced it"):
        wb.log(name, float("inf"))


def test_a_nan_episodic_return_in_a_run_names_the_env_cell_with_env_advice():
    fdg = toy_fdg()
    code = fdg.fragments["env"].cells["step"].code
    fdg.add_fragment("env", code + "\nwb.log('charts/episodic_return', float('nan'))", rate="step")
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=2, steps=2, progress=False)
    err = info.value
    assert (err.fragment, err.rate) == ("env", "step")
    assert "metric 'charts/episodic_return' is nan" in str(err)
    assert DIVERGED not in str(err) and "environment or the reward computation" in str(err)


# -- 4. a new fragment while a run trains -------------------------------------------------


class At:
    """A run logger that calls ``change()`` once, when iteration ``at`` is recorded."""

    def __init__(self, at: int, change) -> None:
        self.at, self.change, self.refused = at, change, []

    def log(self, row: dict) -> None:
        if row["iteration"] == self.at:
            try:
                self.change()
            except wb.WorkbenchError as exc:
                self.refused.append(exc)

    def close(self) -> None:
        pass


LOGGER = "wb.log('logger/updates', float(total))"


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_new_fragment_mid_run_under_a_preset_says_it_cannot_join_and_what_to_do(policy, client):
    fdg = toy_fdg()
    at = At(1, lambda: fdg.add_fragment("logger", LOGGER, rate="iteration"))
    run = fdg.run(
        iterations=4,
        steps=2,
        policy=policy,
        progress=False,
        loggers=[at],
        cluster=client if policy != "inline" else None,
    )
    (refused,) = at.refused
    text = str(refused)
    assert isinstance(refused, PlacementError)
    assert "add it to a group" not in text  # a preset has no groups to edit
    assert "a new fragment cannot join a run in flight under a preset" in text
    assert run.policy_name in text and "%fdg stop" in text and "run this cell again" in text
    # what the message says happened: the cell was not added, and the run went on
    assert "logger" not in fdg.fragments
    assert run.status == "finished" and run.completed_iterations == 4 and run.events == []
    # … and the cell registered again is placed by the preset at the next run
    fdg.add_fragment("logger", LOGGER, rate="iteration")
    again = fdg.run(
        iterations=2, steps=2, policy=policy, progress=False, cluster=client if policy != "inline" else None
    )
    assert "logger/updates" in again.rows[-1]


def test_a_new_fragment_mid_run_under_a_policy_of_your_own_says_to_add_it_to_a_group():
    fdg = toy_fdg()
    mine = wb.Policy("mine", Inline().place(fdg).groups)
    at = At(1, lambda: fdg.add_fragment("logger", LOGGER, rate="iteration"))
    run = fdg.run(iterations=3, steps=2, policy=mine, progress=False, loggers=[at])
    (refused,) = at.refused
    assert "cannot join a run in flight" in str(refused) and "add 'logger' to a group of the policy" in str(refused)
    assert "logger" not in fdg.fragments and run.completed_iterations == 3


def test_a_presets_placement_reused_for_a_grown_fdg_says_to_pass_the_preset():
    fdg = toy_fdg()
    placed = Inline().place(fdg)
    fdg.add_fragment("logger", LOGGER, rate="iteration")
    with pytest.raises(PlacementError) as info:
        fdg.run(iterations=1, steps=2, policy=placed, progress=False)
    assert "Pass the preset itself (policy='inline')" in str(info.value)
    assert "add it to a group" not in str(info.value)
    # a policy of your own keeps its advice
    with pytest.raises(PlacementError, match="policy 'mine' does not place fragment 'logger'; add it to a group."):
        fdg.run(iterations=1, steps=2, policy=wb.Policy("mine", placed.groups), progress=False)
