"""The quickstart, as shipped, solves CartPole-v1 (mean of the last 20 episode returns ≥ 475)."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.notebook import load_notebook

QUICKSTART = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_quickstart_as_shipped_solves_cartpole(policy, client):
    fdg, options = load_notebook(QUICKSTART)
    options.update(policy=policy, progress=False)
    if policy == "coarse":
        options["cluster"] = client
    run = fdg.run(**options)
    assert run.solved_at is not None, run.summary()
    assert run.mean_return() >= 475 and len(run.episode_returns) >= 20
