"""PPO's NumPy ``act`` for a few CPU observations (workbench.algorithms.numpy_act), by
mechanism: it computes what the torch path computes, draws from torch's seeded generator
with the policy's probabilities, follows the weights as they change in place, and steps
aside for what it cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbench.algorithms import numpy_act, ppo


def _obs(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 4)).astype(np.float32)


def _torch_path(agent, obs):
    with torch.no_grad():
        logp_all = torch.log_softmax(ppo.forward(agent.actor, agent.normalize(torch.from_numpy(obs))), -1)
        return logp_all.numpy(), agent.value(torch.from_numpy(obs)).numpy()


@pytest.mark.parametrize("norm_obs", [False, True])
def test_log_probs_and_values_are_the_torch_paths(norm_obs):
    agent = ppo.ActorCritic(4, 3, norm_obs=norm_obs)
    if norm_obs:
        agent.obs_norm.update(torch.from_numpy(_obs(64, seed=1) * 3 + 1))
    obs = _obs(16)
    action, logp, value = agent.act(obs)
    logp_all, expected_value = _torch_path(agent, obs)
    np.testing.assert_allclose(value, expected_value, atol=1e-5)
    np.testing.assert_allclose(logp, logp_all[np.arange(16), action], atol=1e-5)
    assert action.dtype == np.int64 and logp.dtype == value.dtype == np.float32


def test_draws_follow_the_probabilities_from_the_seeded_generator():
    agent = ppo.ActorCritic(4, 3)
    with torch.no_grad():
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, -1.0]))  # unequal probabilities
    obs = np.zeros((128, 4), np.float32)
    torch.manual_seed(7)
    draws = np.concatenate([agent.act(obs)[0] for _ in range(200)])
    torch.manual_seed(7)
    again = np.concatenate([agent.act(obs)[0] for _ in range(200)])
    assert np.array_equal(draws, again)  # the generator the actor cell seeds
    probs = np.exp(_torch_path(agent, obs[:1])[0][0])
    freq = np.bincount(draws, minlength=3) / draws.size
    np.testing.assert_allclose(freq, probs, atol=0.01)  # 25,600 draws: 4+ standard errors


def test_it_reads_weights_changed_in_place_and_rebuilds_for_replaced_ones():
    agent, other = ppo.ActorCritic(4, 2), ppo.ActorCritic(4, 2)
    with torch.no_grad():
        other.critic[-1].bias.fill_(3.0)
    obs = _obs(4)
    agent.act(obs)  # builds the NumPy views
    agent.load_state_dict(other.state_dict())  # copies in place
    np.testing.assert_allclose(agent.act(obs)[2], _torch_path(other, obs)[1], atol=1e-5)
    agent.critic[-1] = nn.Linear(64, 1)  # a new layer: new tensors
    with torch.no_grad():
        agent.critic[-1].bias.fill_(-5.0)
    np.testing.assert_allclose(agent.act(obs)[2], _torch_path(agent, obs)[1], atol=1e-5)


def test_what_numpy_cannot_run_takes_the_torch_path(monkeypatch):
    calls = []
    real = ppo._sample
    monkeypatch.setattr(ppo, "_sample", lambda agent, x: calls.append(len(x)) or real(agent, x))
    agent = ppo.ActorCritic(4, 2)
    agent.act(_obs(4))
    assert calls == []  # the NumPy path
    agent.act(_obs(numpy_act.SMALL_BATCH + 1))  # many rows
    handle = agent.actor[0].register_forward_hook(lambda *a: None)
    agent.act(_obs(4))  # a hook must run
    handle.remove()
    agent.actor[1] = nn.GELU()  # a layer NumPy does not have
    agent.act(_obs(5))
    agent.actor[1] = ppo.Tanh()
    agent.fast_numpy_act = False  # switched off
    agent.act(_obs(6))
    assert calls == [numpy_act.SMALL_BATCH + 1, 4, 5, 6]
    agent.fast_numpy_act = True
    agent.act(_obs(4))
    assert len(calls) == 4


def test_a_pickled_or_copied_network_builds_its_own_views():
    import copy
    import pickle

    agent = ppo.ActorCritic(4, 2, norm_obs=True)
    obs = _obs(4)
    agent.act(obs)  # the cache: views of these tensors
    for twin in (pickle.loads(pickle.dumps(agent)), copy.deepcopy(agent)):
        assert "_numpy_act" not in twin.__dict__
        with torch.no_grad():
            twin.critic[-1].bias.fill_(2.0)  # the twin's weights, not the original's
        np.testing.assert_allclose(twin.act(obs)[2], _torch_path(twin, obs)[1], atol=1e-5)
        assert not np.allclose(twin.act(obs)[2], agent.act(obs)[2])
