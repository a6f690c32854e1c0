"""``wb.allreduce`` means the same under every policy: what it takes and gives (one array,
tensor or number; integers averaged as floats) is checked before anything is reduced, and
replicas that call it a different number of times in an iteration are an error at the
first reduction that would mix iterations — over the channels and over gloo alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.errors import FragmentRuntimeError


def _learners(cell: str) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb})
    fdg.add_fragment("env", "n = 4 // replica.count", rate="init")
    fdg.add_fragment("env", "reward = np.ones(n, np.float32)", rate="step")
    fdg.add_fragment("learner", "seen = []", rate="init")
    fdg.add_fragment("learner", cell, rate="iteration")
    return fdg


UNEQUAL = """\
for epoch in range(3 if replica.index == 0 else 2):  # replica 1 stops an epoch sooner
    seen.append((replica.iteration, float(wb.allreduce(torch.full((3,), 10.0 * replica.iteration))[0])))
"""


@pytest.mark.parametrize("allreduce", ["channels", "torch"])
def test_replicas_that_reduce_a_different_number_of_times_are_stopped_before_iterations_mix(allreduce, client):
    fdg = _learners(UNEQUAL)
    with pytest.raises(FragmentRuntimeError) as info:
        fdg.run(iterations=3, steps=2, policy="multilearner", cluster=client, progress=False, allreduce=allreduce)
    text = str(info.value)
    # (whichever of the two replicas that meet the mismatch reports first: each says it)
    assert info.value.fragment == "learner" and info.value.iteration in (0, 1), text
    assert "called wb.allreduce a different number of times in an iteration" in text
    assert (
        "is in iteration 1 but replica 0 sent its value for the same reduction from iteration 0" in text
        or "is in iteration 0 but replica 1 sent its value for the same reduction from iteration 1" in text
    ), text


@pytest.mark.parametrize("policy", ["inline", "multilearner"])
def test_what_allreduce_takes_and_gives_is_the_same_under_every_policy(policy, client):
    cell = """\
whole = wb.allreduce(np.arange(3))
tensor = wb.allreduce(torch.ones(2, dtype=torch.int64))
seen.append((whole.dtype.name, str(tensor.dtype), type(wb.allreduce(2)).__name__))
"""
    run = _learners(cell).run(iterations=1, steps=2, policy=policy, cluster=client, progress=False, keep_state=True)
    assert run.state.fragments["learner"][0]["seen"] == [("float64", "torch.float32", "float")]
    with pytest.raises(
        FragmentRuntimeError,
        match="wb.allreduce averages one array, tensor or number; it was given a list. Join several gradients into one",
    ):
        _learners("wb.allreduce([np.ones(2), np.ones(3)])").run(
            iterations=1, steps=2, policy=policy, cluster=client, progress=False
        )
