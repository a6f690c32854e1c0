"""A notebook value changed in a cell but never sent does not reach a running run, whatever
other change ends the stretch (docs/live_changes.md: replicas keep the copy they were
given until ``%fdg update`` sends a name).

Before, each stretch read the notebook as it was then, so ``cfg.lr = 9.0`` typed in a cell
reached the learner at the boundary of any other change — an update of another name, a
re-run cell — and the run's events named only that change.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import workbench as wb
from tests.live.test_live_changes import At

ITERATIONS = 16  # as tests/live/test_live_changes.py: room for the boundary under coarse
AT = 1


class Config:
    lr = 0.5


LEARN = "weights = weights + cfg.lr\nwb.log('lr', cfg.lr)\nwb.log('scale', float(scale))"


def _fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "time": time, "cfg": Config(), "scale": 1.0})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("env", "time.sleep(0.005)\nobs = obs + 0 * weights.sum()", rate="step")
    fdg.add_fragment("learner", "weights = np.zeros(2)", rate="init")
    fdg.add_fragment("learner", LEARN, rate="iteration")
    return fdg


def _logged(run, name: str) -> list[float]:
    return [row[name] for row in run.rows if name in row]


def _unsent_then(fdg: wb.FDG, send):
    """At iteration AT: change ``cfg.lr`` in place without sending it, then ``send()``."""

    def change():
        fdg.namespace["cfg"].lr = 9.0
        return send()

    return At(AT, change)


OTHER_CHANGES = {
    "an update of another name": lambda fdg: fdg.update(scale=2.0),
    "a re-run cell": lambda fdg: fdg.add_fragment("learner", LEARN + "\nwb.log('edited', 1.0)", rate="iteration"),
}


@pytest.mark.parametrize("policy", ["inline", "coarse"])
@pytest.mark.parametrize("other", sorted(OTHER_CHANGES))
def test_a_value_changed_but_not_sent_stays_as_given_across_another_change(policy, other, client):
    fdg = _fdg()
    at = _unsent_then(fdg, lambda: OTHER_CHANGES[other](fdg))
    run = fdg.run(
        iterations=ITERATIONS,
        steps=2,
        policy=policy,
        cluster=client if policy != "inline" else None,
        progress=False,
        loggers=[at],
    )
    assert run.status == "finished" and at.result is not None, run.error
    assert [e.kind for e in run.events] in (["updated"], ["edited"]), run.events  # the other change landed
    assert set(_logged(run, "lr")) == {0.5}  # the unsent one never did
    if other == "an update of another name":
        assert _logged(run, "scale")[-1] == 2.0
    else:
        assert _logged(run, "edited")


class _OnceLanded:
    """A run logger that calls ``change()`` once, at the first row after the run's first
    change has landed (whenever a busy machine lets it)."""

    def __init__(self, fdg: wb.FDG, change) -> None:
        self.fdg, self.change, self.result = fdg, change, None

    def log(self, row: dict) -> None:
        run = self.fdg.last_run
        if self.result is None and run is not None and run.events:
            self.result = self.change()

    def close(self) -> None:
        pass


def test_sending_the_value_later_applies_it_from_where_it_lands(client):
    fdg = _fdg()
    first = _unsent_then(fdg, lambda: fdg.update(scale=2.0))
    later = _OnceLanded(fdg, lambda: fdg.update(cfg=fdg.namespace["cfg"]))
    run = fdg.run(
        iterations=2 * ITERATIONS, steps=2, policy="coarse", cluster=client, progress=False, loggers=[first, later]
    )
    assert run.status == "finished" and later.result is not None, run.error
    assert [e.kind for e in run.events] == ["updated", "updated"], run.events
    landed = run.events[1].iteration
    lr = _logged(run, "lr")
    assert lr[:landed] == [0.5] * landed and set(lr[landed:]) == {9.0}
