"""PPO's update, by mechanism (issue 29): the minibatch loop visits every sample once per
epoch, the CPU tanh is tanh, observation statistics take in the rollout before the epochs and travel
with the weights, and the advantage/value options compute what they say. No learning
thresholds, no wall time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.algorithms import ppo


def _rollout(T=8, N=16, seed=0):
    rng = np.random.default_rng(seed)
    state = rng.normal(size=(T, N, 4)).astype(np.float32)
    action = rng.integers(0, 2, size=(T, N))
    logp = np.full((T, N), np.log(0.5), np.float32)
    value = rng.normal(size=(T, N)).astype(np.float32)
    reward = np.ones((T, N), np.float32)
    starts = rng.random((T, N)) < 0.05
    return state, action, logp, value, reward, starts, state[-1], starts[-1]


def _agent(cfg, seed=0):
    """A network whose update takes the torch path (the NumPy one: tests/test_numpy_update.py)."""
    torch.manual_seed(seed)
    agent = ppo.ActorCritic(4, 2, cfg.hidden, norm_obs=cfg.norm_obs)
    agent.fast_numpy_update = False
    return agent, torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)


@pytest.mark.parametrize("epochs, minibatches", [(3, 4), (2, 1), (1, 8), (2, 3), (1, 31)])
def test_every_epoch_visits_each_sample_once(monkeypatch, epochs, minibatches):
    cfg = ppo.PPOConfig(num_envs=16, num_steps=8, update_epochs=epochs, num_minibatches=minibatches)
    agent, optimizer = _agent(cfg)
    seen: list[torch.Tensor] = []
    real = ppo._minibatch_step

    def spy(agent, optimizer, cfg, params, batch, mb):
        seen.append(mb.clone())
        return real(agent, optimizer, cfg, params, batch, mb)

    monkeypatch.setattr(ppo, "_minibatch_step", spy)
    ppo.ppo_update(agent, optimizer, cfg, 0, *_rollout())
    size = 8 * 16
    assert len(seen) == epochs * minibatches
    sizes = {len(mb) for mb in seen}  # as even as the batch allows: 128 in 3 is 43, 43, 42
    assert sizes <= {size // minibatches, -(-size // minibatches)} and min(sizes) >= 2
    for e in range(epochs):
        epoch = torch.cat(seen[e * minibatches : (e + 1) * minibatches])
        assert torch.equal(epoch.sort().values, torch.arange(size))


@pytest.mark.parametrize("numpy_step", [False, True])
def test_a_batch_minibatches_do_not_divide_keeps_the_weights_finite(numpy_step):
    # 160 samples in 53 minibatches: a split by size // count (3) made 54, the last of 1
    # sample, whose normalised advantages are NaN and made every weight NaN
    cfg = ppo.PPOConfig(num_envs=20, num_steps=8, update_epochs=2, num_minibatches=53)
    agent, optimizer = _agent(cfg)
    agent.fast_numpy_update = numpy_step
    before = [p.detach().clone() for p in agent.parameters()]
    losses = ppo.ppo_update(agent, optimizer, cfg, 0, *_rollout(N=20))
    assert all(np.isfinite(v) for k, v in losses.items() if k.startswith("losses/"))
    assert all(torch.isfinite(p).all() for p in agent.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters()))


def test_more_minibatches_than_pairs_of_samples_is_refused_with_the_largest_that_works():
    cfg = ppo.PPOConfig(num_envs=4, num_steps=8, update_epochs=1, num_minibatches=20)
    agent, optimizer = _agent(cfg)
    with pytest.raises(ValueError, match=r"num_minibatches=20 splits a batch of 32 samples.*≤ 16"):
        ppo.ppo_update(agent, optimizer, cfg, 0, *_rollout(T=8, N=4))


def test_cpu_tanh_is_tanh_in_values_and_gradients():
    x = torch.linspace(-12, 12, 20001, dtype=torch.float32)
    assert (ppo.tanh(x) - torch.tanh(x)).abs().max() < 3e-7  # no autograd: the plain path
    a = x.clone().requires_grad_()
    b = x.clone().requires_grad_()
    (ppo.tanh(a) * torch.cos(a)).sum().backward()  # the autograd Function
    (torch.tanh(b) * torch.cos(b)).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-6)
    assert ppo.Tanh()(x).equal(ppo.tanh(x)) and isinstance(ppo.Tanh(), torch.nn.Tanh)
    with torch.inference_mode():
        assert (ppo.tanh(x) - torch.tanh(x)).abs().max() < 3e-7


def test_the_network_uses_the_cpu_tanh_everywhere():
    agent = ppo.ActorCritic(4, 2)
    assert sum(type(m) is ppo.Tanh for m in agent.modules()) == 4
    obs = torch.randn(5, 4)
    logp, entropy, value = agent.evaluate(obs, torch.zeros(5, dtype=torch.long))
    expected = torch.log_softmax(agent.actor(obs), -1)[:, 0]
    torch.testing.assert_close(logp, expected, rtol=0, atol=0)  # forward() == the modules' own call
    torch.testing.assert_close(value, agent.critic(obs).squeeze(-1), rtol=0, atol=0)


def test_obs_norm_keeps_the_running_mean_and_variance_of_all_batches():
    rng = np.random.default_rng(1)
    batches = [rng.normal(loc=[0, 5, -2, 0.1], scale=[1, 3, 0.5, 0.01], size=(n, 4)) for n in (7, 64, 300)]
    norm = ppo.ObsNorm(4)
    for b in batches:
        norm.update(torch.tensor(b, dtype=torch.float32))
    everything = np.concatenate(batches).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), everything.mean(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(norm.var.numpy(), everything.var(0), rtol=1e-4, atol=1e-9)
    assert norm.count.item() == len(everything)
    x = torch.tensor(everything[:5], dtype=torch.float32)
    expected = ((everything[:5] - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-8)).clip(-10, 10)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert norm(torch.full((1, 4), 1e6)).max().item() == 10.0  # clipped


def test_obs_norm_averages_the_batch_moments_across_learners(monkeypatch):
    """Each learner replica passes its batch's [mean, mean of squares] to wb.allreduce once;
    with the average of two equal batches both end with the statistics of their union."""
    rng = np.random.default_rng(2)
    halves = [torch.tensor(rng.normal(size=(50, 4)) * 3 + 1, dtype=torch.float32) for _ in range(2)]
    moments = [torch.cat([h.mean(0), (h * h).mean(0)]) for h in halves]
    calls = []

    def allreduce(value):
        calls.append(value.shape)
        return (moments[0] + moments[1]) / 2

    monkeypatch.setattr(ppo.wb, "allreduce", allreduce)
    learners = [ppo.ObsNorm(4), ppo.ObsNorm(4)]
    for norm, half in zip(learners, halves):
        norm.update(half)
    assert calls == [(8,), (8,)]
    assert all(torch.equal(a, b) for a, b in zip(learners[0].buffers(), learners[1].buffers()))
    union = torch.cat(halves).double()
    torch.testing.assert_close(learners[0].mean, union.mean(0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(learners[0].var, union.var(0, unbiased=False), rtol=1e-4, atol=1e-6)


def test_the_update_adds_the_rollout_to_the_statistics_before_its_epochs(monkeypatch):
    cfg = ppo.PPOConfig(num_envs=16, num_steps=8, update_epochs=2, num_minibatches=2, norm_obs=True)
    agent, optimizer = _agent(cfg)
    counts = []
    real = ppo._minibatch_step

    def spy(agent, optimizer, cfg, params, batch, mb):
        counts.append(agent.obs_norm.count.item())
        return real(agent, optimizer, cfg, params, batch, mb)

    monkeypatch.setattr(ppo, "_minibatch_step", spy)
    rollout = _rollout()
    ppo.ppo_update(agent, optimizer, cfg, 0, *rollout)
    assert counts == [8 * 16] * 4  # every epoch learns under the new statistics
    state = torch.from_numpy(rollout[0].reshape(-1, 4)).double()
    assert agent.obs_norm.count.item() == 8 * 16
    torch.testing.assert_close(agent.obs_norm.mean, state.mean(0), rtol=1e-6, atol=1e-6)
    # the statistics are in the weights: an actor loading them normalises as the learner does
    policy = ppo.ActorCritic(4, 2, cfg.hidden, norm_obs=True)
    policy.load_state_dict(agent.state_dict())
    obs = torch.randn(6, 4)
    assert torch.equal(policy.normalize(obs), agent.normalize(obs))
    assert not torch.equal(agent.normalize(obs), obs)


def test_without_norm_obs_the_network_has_no_statistics():
    agent = ppo.ActorCritic(4, 2)
    assert agent.obs_norm is None and not any("obs_norm" in k for k in agent.state_dict())
    obs = torch.randn(3, 4)
    assert agent.normalize(obs) is obs


@pytest.mark.parametrize("norm_adv, clip_vloss", [(True, False), (False, False), (True, True)])
def test_minibatch_losses_follow_the_options(norm_adv, clip_vloss):
    cfg = ppo.PPOConfig(num_envs=4, num_steps=8, norm_adv=norm_adv, clip_vloss=clip_vloss, norm_obs=False)
    agent, optimizer = _agent(cfg)
    n = 32
    g = torch.Generator().manual_seed(3)
    obs, act = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    logp, adv = torch.full((n,), -0.7) + 0.1 * torch.randn(n, generator=g), torch.randn(n, generator=g) * 5 + 2
    ret = torch.randn(n, generator=g) * 3
    with torch.no_grad():
        new_logp, _, new_value = agent.evaluate(obs, act)
    ratio = (new_logp - logp).exp()
    a = (adv - adv.mean()) / (adv.std() + 1e-8) if norm_adv else adv
    pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
    if clip_vloss:
        old = ret - adv
        clipped = old + (new_value - old).clamp(-0.2, 0.2)
        v = 0.5 * torch.max((new_value - ret) ** 2, (clipped - ret) ** 2).mean()
    else:
        v = 0.5 * ((new_value - ret) ** 2).mean()
    params = list(agent.parameters())
    pg_loss, v_loss, _ = ppo._minibatch_step(agent, optimizer, cfg, params, (obs, act, logp, adv, ret), torch.arange(n))
    torch.testing.assert_close(pg_loss, pg, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v_loss, v, rtol=1e-5, atol=1e-6)


def test_time_limits_bootstrap_exactly_the_cut_steps_with_the_collecting_network(monkeypatch):
    """reward + γ·V(final obs) where truncated and not terminated (SB3's rule), computed
    with the network before the update moves it; off with cfg.bootstrap_truncated=False."""
    T, N = 6, 5
    rng = np.random.default_rng(3)
    terminated = rng.random((T, N)) < 0.3
    truncated = rng.random((T, N)) < 0.3
    cut = truncated & ~terminated
    assert cut.any() and (truncated & terminated).any()  # both kinds in the rollout
    final_obs = rng.normal(size=(T, N, 4)).astype(np.float32)
    reward = rng.normal(size=(T, N)).astype(np.float32)
    real, seen = ppo.gae, {}

    def spy(rewards, *args):  # the rewards GAE is given
        seen["reward"] = np.array(rewards)
        return real(rewards, *args)

    monkeypatch.setattr(ppo, "gae", spy)
    for on in (True, False):
        cfg = ppo.PPOConfig(num_envs=N, num_steps=T, bootstrap_truncated=on)
        agent, optimizer = _agent(cfg)
        with torch.no_grad():
            v = agent.value(torch.from_numpy(final_obs.reshape(-1, 4))).numpy().reshape(T, N)
        expected = reward + cfg.gamma * v * cut if on else reward
        state, action, logp, value, _, starts, last_obs, last_done = _rollout(T, N)
        ppo.ppo_update(
            agent,
            optimizer,
            cfg,
            0,
            state,
            action,
            logp,
            value,
            reward,
            starts,
            last_obs,
            last_done,
            truncated=cut,
            final_obs=final_obs,
        )
        np.testing.assert_allclose(seen["reward"], expected, rtol=1e-6, atol=1e-6)
