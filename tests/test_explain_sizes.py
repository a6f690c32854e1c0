"""``plan.explain()`` with measured sizes: lists and tuples crossing a boundary show the
bytes they hold, and one the probe saw empty (``batches = []`` until a warm-up ends) is of
unknown size, never "0 B" (docs/policies.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.fdg.plan import MeasuredSizes, make_plan
from workbench.fdg.policy import Group, Policy

T = 4
#: env+actor on two replicas, the learner apart: stacked values gathered, weights broadcast
APART = Policy("apart", (Group(("env",), 2), Group(("learner",), 1)))

#: (a value, as a cell writes it; the bytes it holds); a list's items of one shape, as a
#: step value's must be to be stacked [T, …]
VALUES = {
    "tuple of arrays": ("(np.zeros(10), np.ones(5))", 120),
    "list of arrays": ("[np.zeros(10), np.ones(10)]", 160),
    "list of numbers": ("[1.0, 2.0, 3.0]", 24),
    "tuple of ints and bools": ("(1, 2, True)", 24),
    "nested": ("((np.zeros(2), [np.zeros(3), np.ones(3)]), 4.0, [[1.0, 2.0]])", 88),
    "list of dicts": ("[{'obs': np.zeros(4), 'act': np.zeros(1, dtype=np.int64)}]", 40),
    "tuple of tensors": ("(torch.zeros(8), torch.zeros(2, dtype=torch.float64))", 48),
}


def _fdg(step_value: str, iteration_value: str, init_value: str | None = None) -> wb.FDG:
    """The env writes ``traj`` each step (read stacked by the learner); the learner writes
    ``weights`` at init and each iteration (read by the env)."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("env", f"traj = {step_value}\nobs = obs + 1 + 0 * len(weights)", rate="step")
    fdg.add_fragment("learner", f"weights = {init_value or iteration_value}", rate="init")
    fdg.add_fragment("learner", f"seen = len(traj)\nweights = {iteration_value}", rate="iteration")
    return fdg


def _route(text: str, name: str) -> str:
    lines = [line for line in text.splitlines() if f": {name} (" in line and "once, at init" not in line]
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("kind", sorted(VALUES))
def test_lists_and_tuples_crossing_a_boundary_show_the_bytes_they_hold(kind):
    value, held = VALUES[kind]
    fdg = _fdg(value, value)
    sizes = fdg.measure_sizes()
    assert sizes["traj"] == held and sizes["weights"] == held
    text = make_plan(fdg, APART).explain(sizes, T)
    assert f"[gather, {T * held} B/iteration]" in _route(text, "traj")  # [T, …] per iteration
    assert f"[broadcast, {2 * held} B/iteration]" in _route(text, "weights")  # to each of 2 replicas
    assert "on the wire per iteration: at most" in text


#: what a cell writes before a warm-up has ended: a container with nothing in it yet
EMPTY = ["[]", "()", "{}", "[[]]", "([], ())", "[np.zeros(0)]"]


@pytest.mark.parametrize("empty", EMPTY)
def test_a_list_written_empty_in_the_probe_is_of_unknown_size_not_0_bytes(empty):
    fdg = _fdg("(np.zeros(3),)", f"[np.zeros(100)] if seen > 10**6 else {empty}", empty)  # a long warm-up
    sizes = fdg.measure_sizes()
    assert "weights" not in sizes and "weights" in sizes.empty
    text = make_plan(fdg, APART).explain(sizes, T)
    assert _route(text, "weights").endswith("[broadcast, size not measured: written empty in the first iteration]")
    assert " 0 B" not in _route(text, "weights")
    assert "on the wire per iteration: at least" in text
    assert text.rstrip().endswith("(plus weights, written empty in the first iteration)")


def test_both_reasons_for_an_unknown_size_are_said_apart():
    """Pure (no probe): one name the sizes never saw written, one they saw written empty."""
    fdg = wb.FDG()
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("env", "traj = (obs,)\nobs = obs + len(weights) + late", rate="step")
    fdg.add_fragment("learner", "weights = []\nlate = 0", rate="init")
    fdg.add_fragment("learner", "weights = []\nlate = len(traj)", rate="iteration")
    sizes = MeasuredSizes({"traj": 24, "obs": 16}, empty=["weights"])  # no "late": not written
    text = make_plan(fdg, APART).explain(sizes, T)
    assert _route(text, "late").endswith("size not measured: not written in the first iteration]")
    assert _route(text, "weights").endswith("size not measured: written empty in the first iteration]")
    total = text.splitlines()[-1]
    assert total.startswith("  on the wire per iteration: at least 96 B (plus ")
    assert "late, written only after the first iteration" in total
    assert "weights, written empty in the first iteration" in total


def test_a_dqn_buffer_apart_does_not_show_its_sampled_batches_as_0_bytes():
    """The case that showed it: DQN's buffer as its own fragment hands the learner a list
    of batches, empty until ``learning_starts`` (docs/off_policy.md)."""
    from workbench.algorithms import dqn

    fdg = dqn.build_fdg(buffer="fragment")
    apart = Policy("buffer apart", (Group(("actor", "env"), 2), Group(("buffer",), 1), Group(("learner",), 1)))
    text = make_plan(fdg, apart).explain(fdg.measure_sizes(), 16)
    assert _route(text, "batches").endswith("size not measured: written empty in the first iteration]")
    assert "36.0 KiB/iteration" in _route(text, "weights")  # the weights, measured as before
