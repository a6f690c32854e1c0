"""The quickstart, as shipped, solves CartPole-v1 (mean of the last 20 episode returns ≥ 475),
and under coarse on 2 workers ends with a line of the README's example's form, the same
numbers on every run. Not the README's very numbers: another CPU's SIMD kernels round NumPy's
and OpenBLAS's sums otherwise (this VM with AVX-512 solved at iteration 91 where the one the
README's line came from solved at 107), so the iteration a host solves at is that host's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.notebook import load_notebook

pytestmark = pytest.mark.slow  # full trainings to a learning target

QUICKSTART = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
README = QUICKSTART.parents[1] / "README.md"


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_quickstart_as_shipped_solves_cartpole(policy, client):
    fdg, options = load_notebook(QUICKSTART)
    options.update(policy=policy, progress=False)
    if policy == "coarse":
        options["cluster"] = client
    run = fdg.run(**options)
    assert run.solved_at is not None, run.summary()
    assert run.mean_return() >= 475 and len(run.episode_returns) >= 20
    if policy == "coarse":  # the README's first command: its line's form, the same numbers every run
        said = " ".join(README.read_text().split())
        form = r"(solved: \d+/\d+ iterations under SingleLearnerCoarse), .* (solved \(≥ 475\) at iteration \d+)"
        assert re.search(f"`{form.replace('.*', '…')}", said), said
        first = re.search(form, run.summary()).groups()
        again = re.search(form, fdg.run(**options).summary()).groups()
        assert again == first, (first, again)


@pytest.mark.parametrize("policy", ["SingleLearnerFine", "MultiLearner", "GPUOnly", "Async", "auto"])
def test_quickstart_cells_run_unchanged_under_every_policy(policy, client):
    """Tiny budgets: the same cells, byte for byte, train under each preset (full solves are
    in benchmarks/bench_policies.py)."""
    fdg, options = load_notebook(QUICKSTART)
    run = fdg.run(
        iterations=10 if policy == "auto" else 3, steps=options["steps"], policy=policy, cluster=client, progress=False
    )
    assert run.status == "finished"
    assert run.env_steps > 0 and "losses/policy_loss" in run.metrics


#: Async A3C's learning curve depends on the order gradients arrive in, which the machine's
#: load decides, and A2C-style training on CartPole rises and falls after its first peak
#: (inline too). Measured over 600 iterations (153,600 env steps), seed 2, a second process
#: keeping a core busy: the best 64-episode mean was 286-500 in 14 runs, while the last 64
#: episodes ranged from 16 to 500. A uniformly random policy scores about 22. So the test
#: asserts the peak, with a margin of about 2x below the lowest measured one.
A3C_PEAK_FLOOR = 150.0


def _best_mean(returns, window: int) -> float:
    """The best mean of ``window`` consecutive episode returns (-inf with fewer episodes)."""
    best, total = float("-inf"), 0.0
    for i, value in enumerate(returns):
        total += value - (returns[i - window] if i >= window else 0.0)
        if i >= window - 1:
            best = max(best, total / window)
    return best


def test_a3c_learns_under_async(client):
    """A3C's cells, as shipped, learn under Async: the learner's answers reach the actors and
    the episodes get long. A solved run stops early; its evidence (≥ 64 episodes, the last 32
    at ≥ 475) clears the floor on its own."""
    from workbench.algorithms import a3c

    cfg = a3c.A3CConfig(seed=2)
    fdg = a3c.build_fdg({**vars(a3c), "cfg": cfg})
    run = fdg.run(
        iterations=600,
        steps=cfg.num_steps,
        policy="Async",
        cluster=client,
        target_return=cfg.target_return,
        progress=False,
    )
    assert run.status in ("finished", "solved") and run.policy_name == "Async"
    assert _best_mean(run.episode_returns, 64) >= A3C_PEAK_FLOOR, run.summary()
