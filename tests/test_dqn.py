"""DQN: the notebook is the module, and its mechanisms (buffer, target network, ε schedule,
checkpointed buffer) hold under inline and coarse. Learning itself: the slow test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench as wb
from tests.conftest import assert_notebook_is_the_module
from workbench.algorithms import dqn
from workbench.envs import FusedCartPole

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "dqn.ipynb"

#: tiny, so every mechanism shows within 6 iterations of 4 steps × 2 envs (48 env steps)
SMALL = dataclasses.replace(
    dqn.cfg,
    num_envs=2,
    num_steps=4,
    learning_starts=16,
    target_network_frequency=20,
    buffer_size=200,
    exploration_steps=80,
    batch_size=8,
    hidden=16,
)


def _fdg(cfg=SMALL, buffer="learner"):
    ns = dict(vars(dqn))
    ns["cfg"] = cfg
    return dqn.build_fdg(ns, buffer=buffer)


def _kwargs(policy, client):
    return {"policy": policy, "cluster": client} if policy != "inline" else {"policy": policy}


def test_the_notebook_is_the_module():
    assert_notebook_is_the_module(NOTEBOOK, dqn)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_buffer_target_network_and_epsilon_follow_the_run(policy, client, tmp_path):
    run = _fdg().run(
        iterations=6, steps=4, progress=False, keep_state=True, checkpoint_dir=str(tmp_path), **_kwargs(policy, client)
    )
    per_iteration = 4 * 2
    assert run.env_steps == 6 * per_iteration
    learner = run.state.fragments["learner"][0]
    assert len(learner["rb"]) == 6 * per_iteration  # the buffer holds every transition
    assert learner["target_syncs"] == 6 * per_iteration // 20  # synced at 20 and 40 env steps
    expected = [dqn.linear_schedule(1.0, 0.05, 80, (i + 1) * per_iteration) for i in range(6)]
    assert run.metrics["charts/epsilon"].tolist() == pytest.approx(expected)
    assert "losses/td_loss" in run.metrics  # learning started after 16 env steps

    # resume from the checkpoint: the buffer comes back with its transitions, the count goes on
    resumed = _fdg().run(
        iterations=2, steps=4, progress=False, keep_state=True, resume=str(tmp_path), **_kwargs(policy, client)
    )
    assert resumed.env_steps == 8 * per_iteration
    rb = resumed.state.fragments["learner"][0]["rb"]
    assert len(rb) == 8 * per_iteration
    np.testing.assert_array_equal(rb.obs[:48], learner["rb"].obs[:48])
    assert resumed.state.fragments["learner"][0]["target_syncs"] == 8 * per_iteration // 20
    assert resumed.metrics["charts/epsilon"].tolist() == pytest.approx(
        [dqn.linear_schedule(1.0, 0.05, 80, (i + 1) * per_iteration) for i in (6, 7)]
    )


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_the_buffer_as_its_own_fragment_does_the_same(policy, client):
    run = _fdg(buffer="fragment").run(iterations=6, steps=4, progress=False, keep_state=True, **_kwargs(policy, client))
    assert run.env_steps == 6 * 8
    assert len(run.state.fragments["buffer"][0]["rb"]) == 6 * 8
    assert run.state.fragments["learner"][0]["target_syncs"] == 6 * 8 // 20
    assert run.metrics["charts/epsilon"].tolist() == pytest.approx(
        [dqn.linear_schedule(1.0, 0.05, 80, (i + 1) * 8) for i in range(6)]
    )
    assert "losses/td_loss" in run.metrics


def host_act(q_network, obs, epsilon, rng):
    """The reference: ``act`` as it was, all on the host."""
    with torch.no_grad():
        greedy = q_network(torch.as_tensor(obs, dtype=torch.float32)).argmax(dim=1).numpy()
    explore = rng.random(len(obs)) < epsilon
    return np.where(explore, rng.integers(0, q_network.net[-1].out_features, len(obs)), greedy)


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.5, 1.0])
def test_act_is_the_host_epsilon_greedy_it_was(epsilon):
    torch.manual_seed(0)
    q = dqn.QNetwork(obs_dim=4, n_actions=3, hidden=16)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    mine, reference = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(20):
        action = dqn.act(q, obs, epsilon, mine)
        expected = host_act(q, obs, epsilon, reference)
        assert action.dtype == expected.dtype and isinstance(action, np.ndarray)
        np.testing.assert_array_equal(action, expected)
    assert mine.random() == reference.random()  # the generator drew the same numbers


#: the env init cell with the GPU's CartPole in its NumPy twin: the device path of the cells
#: (envs.xp.where on info's final_obs, EndedEpisodes, the buffer on replica.device) on the CPU
TWIN_ENV_INIT = """\
envs = FusedCartPole(cfg.num_envs // replica.count, seed=cfg.seed + replica.index)
obs = envs.reset()
"""


@pytest.mark.parametrize("buffer", ["learner", "fragment"])
def test_runs_inline_with_the_device_shaped_cartpole(buffer):
    namespace = {**vars(dqn), "cfg": SMALL, "FusedCartPole": FusedCartPole}
    fdg = wb.FDG(namespace=namespace)
    cells = (
        dqn.FRAGMENT_CELLS
        if buffer == "learner"
        else ([c for c in dqn.FRAGMENT_CELLS if not c[0].startswith("%%fragment learner")] + dqn.BUFFER_FRAGMENT_CELLS)
    )
    for line, body in cells:
        fdg.add_cell(line, TWIN_ENV_INIT if line == "%%fragment env --init" else body)
    run = fdg.run(iterations=6, steps=4, progress=False, keep_state=True)
    assert run.env_steps == 6 * 4 * 2
    rb = run.state.fragments["learner" if buffer == "learner" else "buffer"][0]["rb"]
    assert len(rb) == 6 * 4 * 2 and rb.xp is np
    assert np.isfinite(run.metrics["losses/td_loss"].dropna()).all() and run.metrics["losses/td_loss"].notna().any()
    assert all(1 <= r <= 500 for r in run.episode_returns)


#: the step budget DQN is given to solve CartPole-v1 (docs/off_policy.md): cfg.iterations ×
#: cfg.num_steps × cfg.num_envs env steps
BUDGET = dqn.cfg.iterations * dqn.cfg.num_steps * dqn.cfg.num_envs


@pytest.mark.long  # 10 trainings of 80k–160k env steps: an hour or more here; run by hand
@pytest.mark.parametrize("policy", ["inline", "coarse"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_dqn_solves_cartpole_within_its_step_budget(seed, policy, client):
    cfg = dataclasses.replace(dqn.cfg, seed=seed)
    run = _fdg(cfg).run(
        iterations=cfg.iterations,
        steps=cfg.num_steps,
        target_return=cfg.target_return,
        progress=False,
        **_kwargs(policy, client),
    )
    assert run.status == "solved", run.summary()
    assert run.env_steps <= BUDGET
