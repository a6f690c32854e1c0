"""Every shipped algorithm evaluates after a very short run: the mechanism, not the score."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.algorithms import a3c, dqn, mappo, ppo, ppo_continuous


def _fdg(module, config, **overrides):
    return module.build_fdg({**vars(module), "cfg": dataclasses.replace(config, **overrides)})


CASES = {
    "ppo": lambda: _fdg(ppo, ppo.PPOConfig(), num_envs=4),
    "ppo_continuous": lambda: _fdg(
        ppo_continuous,
        ppo_continuous.PPOContinuousConfig(),
        env_id="Pendulum-v1",
        num_envs=2,
        num_steps=8,
        num_minibatches=2,
    ),
    "dqn": lambda: _fdg(dqn, dqn.DQNConfig(), num_envs=4),
    "a3c": lambda: _fdg(a3c, a3c.A3CConfig(), num_envs=4),
    "mappo": lambda: _fdg(mappo, mappo.MAPPOConfig(), num_envs=4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_shipped_algorithm_evaluates_greedily_on_held_out_seeds(name):
    run = CASES[name]().run(iterations=2, steps=8, progress=False)
    result = run.evaluate(episodes=3)
    assert result.episodes == 3 and len(result.lengths) == 3 and all(n > 0 for n in result.lengths)
    assert result.greedy, "the algorithm's actor asks wb.evaluating()"
    assert result.held_out and not set(result.seeds) & set(result.cell_seeds)
    assert result.iteration == 2


def test_a_run_placed_on_the_cluster_evaluates_from_its_collected_state():
    """Under SingleLearnerCoarse the state comes back from the workers (2 actor+env
    replicas, pickled): evaluation plays one replica's kept actor with fresh envs."""
    run = ppo.build_fdg().run(iterations=2, steps=8, policy="coarse", progress=False)
    assert len(run.state.fragments["env"]) == 2
    result = run.evaluate(episodes=4)
    assert result.episodes == 4 and result.greedy and result.held_out
