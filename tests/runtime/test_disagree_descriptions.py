"""Replicas that wrote different values with no batch axis: the error's two descriptions
always differ, whatever the values (issue 30: two 0-d arrays read "replica 0 wrote a
float64 array of shape (), replica 1 a float64 array of shape ()")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.runtime.values.arrays import ReplicasDisagree, gather


class Opaque:
    """An object without __eq__: two of them are unequal however alike."""


class Same:
    def __eq__(self, other):
        return False

    def __repr__(self):
        return "Same()"


PAIRS = {
    "0-d arrays": (np.array(1.0), np.array(2.0)),
    "0-d tensors": (torch.tensor(3), torch.tensor(4)),
    "long strings, one prefix": ("p" * 60 + "a", "p" * 60 + "b"),
    "objects without __eq__": (Opaque(), Opaque()),
    "objects that read the same": (Same(), Same()),
    "one float in a dict": ({"lr": np.array(0.1)}, {"lr": np.array(0.2)}),
}


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_the_two_replicas_are_described_differently(pair):
    with pytest.raises(ReplicasDisagree) as info:
        gather(list(pair))
    (r0, said0), (r1, said1) = info.value.first, info.value.other
    assert (r0, r1) == (0, 1)
    assert said0 != said1, str(info.value)


SAME = {  # NaN is the same NaN on every replica, whatever holds it (it read "another Tensor, unequal to it by ==")
    "NaN 0-d tensors": (torch.tensor(float("nan")), torch.tensor(float("nan"))),
    "NumPy float32 NaNs": (np.float32("nan"), np.float32("nan")),
    "NaN 0-d arrays": (np.array(float("nan")), np.array(float("nan"))),
}


@pytest.mark.parametrize("pair", SAME.values(), ids=SAME.keys())
def test_replicas_that_wrote_the_same_nan_agree(pair):
    assert gather(list(pair)) is pair[0]


def test_tensors_of_other_dtypes_differ():
    with pytest.raises(ReplicasDisagree):
        gather([torch.tensor(1.0), torch.tensor(1.0, dtype=torch.float64)])
