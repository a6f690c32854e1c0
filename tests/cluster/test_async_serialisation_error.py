"""A value that cannot cross processes is named by where it is in what the cell wrote,
under every policy (issue 30: under Async the error read "([1][0] is a _thread.lock)" —
the [1] was the runtime's own envelope, the (iteration, value) pair an asynchronous
hand-off sends — and never anything of workbench's own)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.transport.serialisable import SerialisationError

VALUES = {  # what the actor's iteration cell writes → where the lock is inside it
    "the lock itself": ("lock", "a _thread.lock cannot be pickled"),
    "in a list": ("[lock]", "[0] is a _thread.lock"),
    "in a dict": ("{'g': np.ones(3), 'lock': lock}", "['lock'] is a _thread.lock"),
}


def _fdg(written: str) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "threading": threading})
    fdg.add_fragment("env", "obs = np.zeros((2, 3))", rate="init")
    fdg.add_fragment("actor", "action = obs.sum(axis=1)", rate="step")
    fdg.add_fragment("env", "obs = obs + 1\nreward = action * 0.0", rate="step")
    fdg.add_fragment("actor", f"lock = threading.Lock()\ngrads = {written}", rate="iteration")
    fdg.add_fragment("learner", "n = grads is not None", rate="iteration")
    return fdg


@pytest.mark.parametrize("case", VALUES, ids=list(VALUES))
def test_the_message_names_the_place_in_the_cells_value_under_every_policy(client, case):
    written, where = VALUES[case]
    said = {}
    for policy in ("async", "coarse"):
        with pytest.raises(SerialisationError) as info:
            _fdg(written).run(iterations=2, steps=2, policy=policy, cluster=client, progress=False)
        said[policy] = str(info.value)
    assert said["async"] == said["coarse"], said
    assert said["async"].startswith(
        "fragment 'actor' writes 'grads', which another group of this policy "
        f"reads, but it cannot be sent between processes ({where})"
    ), said["async"]
    assert "workbench" not in said["async"], said["async"]
