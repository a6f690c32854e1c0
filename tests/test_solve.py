"""The quickstart, as shipped, solves CartPole-v1 (mean of the last 20 episode returns ≥ 475)."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.notebook import load_notebook

pytestmark = pytest.mark.slow  # full trainings to a learning target

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


@pytest.mark.parametrize("policy", ["SingleLearnerFine", "MultiLearner", "GPUOnly", "Async", "auto"])
def test_quickstart_cells_run_unchanged_under_every_policy(policy, client):
    """Tiny budgets: the same cells, byte for byte, train under each preset (full solves are
    in benchmarks/bench_policies.py)."""
    fdg, options = load_notebook(QUICKSTART)
    run = fdg.run(iterations=10 if policy == "auto" else 3, steps=options["steps"], policy=policy,
                  cluster=client, progress=False)
    assert run.status == "finished"
    assert run.env_steps > 0 and "losses/policy_loss" in run.metrics


def test_a3c_solves_under_async(client):
    from workbench.algorithms import a3c

    cfg = a3c.A3CConfig(seed=2)
    fdg = a3c.build_fdg({**vars(a3c), "cfg": cfg})
    run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, policy="Async", cluster=client,
                  target_return=cfg.target_return, progress=False)
    assert run.solved_at is not None, run.summary()
