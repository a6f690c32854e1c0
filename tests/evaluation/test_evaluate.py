"""run.evaluate(): the final state played without learning (real runs, inline, tiny budgets)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.algorithms import ppo
from workbench.evaluation import EvaluationError


@pytest.fixture(scope="module")
def ppo_run():
    return ppo.build_fdg().run(iterations=2, steps=8, progress=False)


def _weights(state):
    """Every tensor the run's state holds, by (fragment, name, key)."""
    out = {}
    for frag, replicas in state.fragments.items():
        for name, value in replicas[0].items():
            if isinstance(value, torch.nn.Module):
                value = value.state_dict()
            if isinstance(value, dict):
                out.update({(frag, name, k): v.clone() for k, v in value.items() if isinstance(v, torch.Tensor)})
    return out


def test_evaluation_changes_no_weight_and_no_random_generator(ppo_run):
    before = _weights(ppo_run.state)
    env = ppo_run.state.fragments["env"][0]
    obs_before = np.array(env["obs"])
    torch_rng, np_rng = torch.get_rng_state(), np.random.get_state()[1].copy()
    ppo_run.evaluate(episodes=3)
    after = _weights(ppo_run.state)
    assert before.keys() == after.keys() and len(before) > 10
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert np.array_equal(env["obs"], obs_before)  # the training envs were not stepped
    assert torch.equal(torch.get_rng_state(), torch_rng) and np.array_equal(np.random.get_state()[1], np_rng)


def test_evaluation_counts_the_episodes_asked_for_and_repeats(ppo_run):
    result = ppo_run.evaluate(episodes=5)
    assert result.episodes == 5 and len(result.lengths) == 5 and result.envs == (0, 1, 2, 3, 4)
    assert all(r == n for r, n in zip(result.returns, result.lengths))  # CartPole: 1 a step
    assert result.env_steps >= max(result.lengths) * 16
    many = ppo_run.evaluate(episodes=40)  # 16 envs: the first 2-3 episodes of each
    assert many.episodes == 40 and sorted(set(many.envs)) == list(range(16))
    assert [many.envs.count(e) for e in range(16)] == [3] * 8 + [2] * 8
    again = ppo_run.evaluate(episodes=5)  # the same held-out seeds, the same generators' seeds
    assert (again.returns, again.lengths) == (result.returns, result.lengths)


def test_held_out_seeds_differ_from_training_seeds(ppo_run):
    result = ppo_run.evaluate(episodes=2)
    assert result.held_out and result.cell_seeds == (ppo.cfg.seed,)
    assert result.seeds == (ppo.cfg.seed + 1_000_000,) and not set(result.seeds) & set(result.cell_seeds)
    asked = ppo_run.evaluate(episodes=2, seed=5)
    assert asked.seeds == (5,) and not asked.held_out and "as asked" in asked.summary()


def test_the_greedy_flag_reaches_the_cells_and_only_while_evaluating():
    seen = []
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "seen": seen})
    fdg.add_fragment(
        "env", "envs = wb.envs.make('CartPole-v1', num_envs=4, seed=replica.index)\nobs = envs.reset()", rate="init"
    )
    fdg.add_fragment(
        "actor",
        "greedy = wb.evaluating()\nseen.append(greedy)\naction = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)",
        rate="step",
    )
    fdg.add_fragment(
        "env",
        "obs, reward, terminated, truncated, info = envs.step(action)\n"
        "wb.log('charts/episodic_return', info['episode_return'])",
        rate="step",
    )
    fdg.add_fragment("learner", "wb.log('greedy_steps', float(sum(greedy)))", rate="iteration")
    run = fdg.run(iterations=2, steps=4, progress=False)
    assert run.metrics["greedy_steps"].tolist() == [0.0, 0.0]  # training: never greedy
    result = run.evaluate(episodes=4)
    assert result.greedy and seen and set(seen) == {True}  # evaluation: every step
    assert result.episodes == 4 and min(result.returns) > 100  # the hand-written controller, deterministic


def test_cells_that_do_not_ask_act_as_in_training_and_the_result_says_so():
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("env", "envs = wb.envs.make('CartPole-v1', num_envs=2, seed=0)\nobs = envs.reset()", rate="init")
    fdg.add_fragment("actor", "action = np.zeros(len(obs), np.int64)", rate="step")
    fdg.add_fragment("env", "obs, reward, terminated, truncated, info = envs.step(action)", rate="step")
    result = fdg.run(iterations=1, steps=2, progress=False).evaluate(episodes=2)
    assert not result.greedy and "no cell asked wb.evaluating()" in repr(result)


def test_the_quickstart_policy_evaluates_at_least_475():
    """The quickstart's cells trained until solved (inline, ~10 s here) play 10 held-out
    episodes greedily at ≥ 475 (500 on this machine)."""
    run = ppo.build_fdg().run(iterations=400, steps=16, target_return=475, progress=False)
    assert run.solved_at is not None
    result = run.evaluate(episodes=10)
    assert result.episodes == 10 and result.greedy and result.held_out
    assert result.mean >= 475, result


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("episodes", [0, -3, 2.5, True, "10"])
def test_bad_episode_counts_are_refused(ppo_run, episodes):
    with pytest.raises(EvaluationError, match="episodes must be a whole number ≥ 1"):
        ppo_run.evaluate(episodes=episodes)


def test_a_bad_seed_is_refused(ppo_run):
    with pytest.raises(EvaluationError, match="seed must be"):
        ppo_run.evaluate(episodes=1, seed=-1)


def test_a_run_that_kept_no_state_says_what_to_do():
    run = ppo.build_fdg().run(iterations=1, steps=4, progress=False, keep_state=False)
    with pytest.raises(EvaluationError, match="kept no state.*keep_state=True"):
        run.evaluate()


def test_an_fdg_without_an_env_fragment_says_what_to_do():
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "obs = np.zeros(3)", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = action * 0\nreward = np.ones(3)", rate="step")
    run = fdg.run(iterations=1, steps=2, progress=False)
    with pytest.raises(EvaluationError, match="no env fragment.*wb.envs.make"):
        run.evaluate()


def test_an_fdg_without_step_cells_says_what_to_do():
    fdg = wb.FDG(namespace={})
    fdg.add_fragment("learner", "x = 1", rate="iteration")
    run = fdg.run(iterations=1, steps=1, progress=False)
    with pytest.raises(EvaluationError, match="no step cells"):
        run.evaluate()


def test_a_cell_that_raises_while_evaluated_names_it_and_loses_nothing(ppo_run):
    fdg = ppo_run.fdg
    bad = wb.FDG(fdg.fragments.values(), {**fdg.namespace, "wb": wb})
    bad.add_fragment(
        "actor",
        "assert not wb.evaluating(), 'no greedy action here'\n"
        "state, starts = obs, done\naction, logp, value = policy.act(obs)",
        rate="step",
    )
    run = dataclasses.replace(ppo_run, fdg=bad)
    before = _weights(run.state)
    with pytest.raises(EvaluationError, match=r"fragment 'actor' \(step cell\).*cell line 1.*no greedy action"):
        run.evaluate(episodes=1)
    assert all(torch.equal(before[k], v) for k, v in _weights(run.state).items())
    assert ppo_run.evaluate(episodes=1).episodes == 1  # and the run evaluates as before


def test_a_run_still_training_is_refused():
    from workbench.runtime.state.run import Run

    with pytest.raises(EvaluationError, match="still training: stop it"):
        Run(policy_name="inline", iterations=5, steps=4).evaluate()


def test_a_run_loaded_from_the_store_plays_as_the_run_it_was(tmp_path):
    """A checkpoint keeps the state encoded (tensors, plain values): the init cells build the
    objects again from the notebook names it was loaded with, and the saved values are laid
    over them, so the loaded run plays exactly as the run that trained did."""
    fdg = ppo.build_fdg()
    trained = fdg.run(iterations=6, steps=16, progress=False, run_store=str(tmp_path), run_name="kept")
    loaded = wb.load_run("kept", store=str(tmp_path), namespace=fdg.namespace)
    again, there = loaded.evaluate(episodes=3), trained.evaluate(episodes=3)
    assert again.returns == there.returns and again.lengths == there.lengths and again.seeds == there.seeds
    assert loaded.show().frames == there.lengths[0] + 1


def test_a_run_loaded_without_its_notebook_names_says_how_to_load_it(tmp_path):
    fdg = ppo.build_fdg()
    fdg.run(iterations=1, steps=8, progress=False, run_store=str(tmp_path), run_name="kept")
    loaded = wb.load_run("kept", store=str(tmp_path))
    with pytest.raises(EvaluationError, match=r"loaded without the notebook names.*namespace=globals\(\)"):
        loaded.evaluate(episodes=1)
