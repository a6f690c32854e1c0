"""A3C, DQN, MAPPO and continuous PPO on a real GPU (skipped without CUDA): under GPUOnly on
a 1-worker LocalCluster each runs with its networks on the GPU and, where the env has a GPU
version (CartPole's fused kernel, simple_spread on CuPy), with the env's arrays on the GPU
from step to learner; continuous PPO keeps its host env (Pendulum-v1, gymnasium) and puts
only the networks there. The pieces against their NumPy twins: the replay buffer and A3C's
gradient. The CPU side of the same code: tests/test_a3c.py, test_dqn.py, test_mappo.py,
test_replay_buffer.py."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from tests.gpu import ON_GPU


pytestmark = ON_GPU

ARRAYS = ("obs", "action", "reward", "next_obs", "terminated")


@pytest.fixture(scope="module")
def cluster():
    """One worker process, which finds the host's GPU (GPUOnly places the whole loop there)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as local,
        Client(local, set_as_default=False) as client,
    ):
        yield client


def _all_ones(run, name: str, iterations: int | None = None) -> None:
    """Every iteration that logged ``name`` logged 1.0 (``iterations``: that many did)."""
    values = run.metrics[name].dropna().tolist()
    assert values and values == [1.0] * len(values), (name, values)
    if iterations is not None:
        assert len(values) == iterations, (name, values)


# ----------------------------------------------------------------------------- pieces
def test_replay_buffer_on_the_gpu_holds_and_samples_what_the_numpy_one_does():
    import cupy
    import torch

    from workbench.algorithms.dqn import ReplayBuffer

    rng = np.random.default_rng(0)
    host, device = ReplayBuffer(7, obs_dim=3), ReplayBuffer(7, obs_dim=3, device="cuda:0")
    assert device.xp is cupy and isinstance(device.obs, cupy.ndarray)
    for n in (3, 4, 19, 0, 7, 30, 1):  # wraps, a batch longer than the capacity, an empty one
        batch = (
            rng.normal(size=(n, 3)).astype(np.float32),
            rng.integers(0, 5, n),
            rng.normal(size=n).astype(np.float32),
            rng.normal(size=(n, 3)).astype(np.float32),
            rng.random(n) < 0.3,
        )
        host.add(*batch)
        device.add(*(cupy.asarray(x) for x in batch))
        assert (device.pos, device.size) == (host.pos, host.size)
        for name in ARRAYS:
            np.testing.assert_array_equal(cupy.asnumpy(getattr(device, name)), getattr(host, name))
    on_host, on_device = host.sample(16, np.random.default_rng(3)), device.sample(16, np.random.default_rng(3))
    for name in ARRAYS:
        assert on_device[name].is_cuda and torch.equal(on_device[name].cpu(), on_host[name]), name
    # a checkpoint's state loads on either device
    back = ReplayBuffer(7, obs_dim=3)
    back.load_state_dict(device.state_dict())
    onto = ReplayBuffer(7, obs_dim=3, device="cuda:0")
    onto.load_state_dict(host.state_dict())
    assert back.xp is np and onto.xp is cupy
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(back, name), getattr(host, name))
        np.testing.assert_array_equal(cupy.asnumpy(getattr(onto, name)), getattr(host, name))


def test_dqn_act_on_the_gpu_keeps_cupy_and_uses_the_host_draws():
    import cupy
    import torch

    from workbench.algorithms.dqn import QNetwork, act

    torch.manual_seed(0)
    q = QNetwork(obs_dim=4, n_actions=2, hidden=16).cuda()
    obs = cupy.asarray(np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32))
    greedy = act(q, obs, 0.0, np.random.default_rng(1))
    assert isinstance(greedy, cupy.ndarray)
    expected = q(torch.from_dlpack(obs)).argmax(dim=1)
    np.testing.assert_array_equal(cupy.asnumpy(greedy), expected.cpu().numpy())
    explored = act(q, obs, 1.0, np.random.default_rng(1))  # every env explores: the host's draws
    rng = np.random.default_rng(1)
    rng.random(64)
    assert isinstance(explored, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(explored), rng.integers(0, 2, 64))


def test_a3c_gradient_of_a_cupy_rollout_is_the_numpy_one():
    import copy

    import cupy
    import torch

    from workbench.algorithms.a3c import A3CConfig, ActorCritic, a3c_gradients, stack_steps

    torch.manual_seed(0)
    cfg = A3CConfig()
    policy = ActorCritic(4, 2, cfg.hidden)
    rng = np.random.default_rng(0)
    steps = [(rng.normal(size=(8, 4)).astype(np.float32), rng.random(8) < 0.1, rng.integers(0, 2, 8)) for _ in range(6)]
    reward = np.ones((6, 8), np.float32)
    last_obs, last_done = rng.normal(size=(8, 4)).astype(np.float32), np.zeros(8, bool)
    state, starts, action = stack_steps(steps)
    on_host = a3c_gradients(policy, cfg, state, action, reward, starts, last_obs, last_done)

    state, starts, action = stack_steps([tuple(cupy.asarray(x) for x in step) for step in steps])
    assert isinstance(state, cupy.ndarray) and state.shape == (6, 8, 4)
    on_gpu = a3c_gradients(
        copy.deepcopy(policy).cuda(),
        cfg,
        state,
        action,
        cupy.asarray(reward),
        starts,
        cupy.asarray(last_obs),
        cupy.asarray(last_done),
    )
    assert isinstance(on_gpu, np.ndarray) and on_gpu.dtype == np.float32
    np.testing.assert_allclose(on_gpu, on_host, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- whole loops
def test_a3c_with_env_actor_and_learner_on_the_gpu(cluster):
    import cupy

    import workbench as wb
    from workbench.algorithms import a3c

    class Watched(a3c.ActorCritic):
        def act(self, obs):
            action, logp, value = super().act(obs)
            wb.log(
                "test/actor_in_and_out_on_device",
                float(isinstance(obs, cupy.ndarray) and isinstance(action, cupy.ndarray)),
            )
            wb.log("test/actor_on_cuda", float(next(self.parameters()).is_cuda))
            return action, logp, value

    def gradients(policy, cfg, state, action, reward, starts, last_obs, last_done):
        wb.log(
            "test/rollout_on_device",
            float(all(isinstance(x, cupy.ndarray) for x in (state, action, reward, starts, last_obs, last_done))),
        )
        return a3c.a3c_gradients(policy, cfg, state, action, reward, starts, last_obs, last_done)

    def apply(model, optimizer, grads, cfg):
        wb.log("test/learner_on_cuda", float(next(model.parameters()).is_cuda))
        return a3c.apply_gradients(model, optimizer, grads, cfg)

    cfg = a3c.A3CConfig(num_envs=256)
    namespace = dict(vars(a3c), cfg=cfg, ActorCritic=Watched, a3c_gradients=gradients, apply_gradients=apply)
    run = a3c.build_fdg(namespace).run(
        iterations=6, steps=cfg.num_steps, policy="gpuonly", cluster=cluster, progress=False
    )
    assert run.status == "finished"
    for name in (
        "test/actor_in_and_out_on_device",
        "test/actor_on_cuda",
        "test/rollout_on_device",
        "test/learner_on_cuda",
    ):
        _all_ones(run, name, iterations=6)
    assert np.isfinite(run.metrics["losses/value_loss"]).all() and np.isfinite(run.metrics["losses/grad_norm"]).all()
    assert run.env_steps == 6 * 256 * cfg.num_steps


def test_dqn_with_env_buffer_and_networks_on_the_gpu(cluster):
    import cupy

    import workbench as wb
    from workbench.algorithms import dqn

    def watched_act(q_network, obs, epsilon, rng):
        action = dqn.act(q_network, obs, epsilon, rng)
        wb.log(
            "test/actor_in_and_out_on_device", float(isinstance(obs, cupy.ndarray) and isinstance(action, cupy.ndarray))
        )
        wb.log("test/actor_on_cuda", float(next(q_network.parameters()).is_cuda))
        return action

    def watched_update(q_network, target_network, optimizer, batches, cfg):
        wb.log(
            "test/learner_and_batches_on_cuda",
            float(
                next(q_network.parameters()).is_cuda
                and next(target_network.parameters()).is_cuda
                and all(t.is_cuda for batch in batches for t in batch.values())
            ),
        )
        return dqn.dqn_update(q_network, target_network, optimizer, batches, cfg)

    # 64 envs × 16 steps = 1,024 env steps an iteration: learning starts in the first
    cfg = dataclasses.replace(dqn.cfg, num_envs=64, num_steps=16, learning_starts=1000, buffer_size=4096)
    namespace = dict(vars(dqn), cfg=cfg, act=watched_act, dqn_update=watched_update)
    run = dqn.build_fdg(namespace).run(
        iterations=5, steps=cfg.num_steps, policy="gpuonly", cluster=cluster, progress=False
    )
    assert run.status == "finished"
    _all_ones(run, "test/actor_in_and_out_on_device", iterations=5)
    _all_ones(run, "test/actor_on_cuda", iterations=5)
    _all_ones(run, "test/learner_and_batches_on_cuda", iterations=5)
    assert np.isfinite(run.metrics["losses/td_loss"]).all()
    assert run.env_steps == 5 * 64 * 16
    assert len(run.episode_returns) > 0


def test_mappo_with_env_actor_and_learner_on_the_gpu(cluster):
    import cupy

    import workbench as wb
    from workbench.algorithms import mappo

    class Watched(mappo.MAPPOAgent):
        def act(self, obs):
            action, logp, value = super().act(obs)
            wb.log(
                "test/actor_in_and_out_on_device",
                float(all(isinstance(x, cupy.ndarray) for x in (obs, action, logp, value))),
            )
            wb.log("test/actor_on_cuda", float(next(self.parameters()).is_cuda))
            return action, logp, value

    def watched_update(agent, *args, **kwargs):
        wb.log("test/learner_on_cuda", float(next(agent.parameters()).is_cuda))
        wb.log("test/rollout_on_device", float(isinstance(kwargs["last_obs"], cupy.ndarray)))
        return mappo.mappo_update(agent, *args, **kwargs)

    cfg = mappo.MAPPOConfig(num_envs=64)
    namespace = dict(vars(mappo), cfg=cfg, MAPPOAgent=Watched, mappo_update=watched_update)
    run = mappo.build_fdg(namespace).run(iterations=3, steps=25, policy="gpuonly", cluster=cluster, progress=False)
    assert run.status == "finished"
    for name in (
        "test/actor_in_and_out_on_device",
        "test/actor_on_cuda",
        "test/learner_on_cuda",
        "test/rollout_on_device",
    ):
        _all_ones(run, name, iterations=3)
    assert np.isfinite(run.metrics["losses/value_loss"]).all()
    assert run.env_steps == 3 * 25 * 64
    assert len(run.episode_returns) == 3 * 64  # 25-step episodes: every env ends one an iteration


def test_continuous_ppo_with_a_host_env_and_the_networks_on_the_gpu(cluster):
    import workbench as wb
    from workbench.algorithms import ppo_continuous

    class Watched(ppo_continuous.GaussianActorCritic):
        def act(self, obs):
            action, logp, value = super().act(obs)
            wb.log(
                "test/actor_in_and_out_on_host",
                float(all(isinstance(x, np.ndarray) for x in (obs, action, logp, value))),
            )
            wb.log("test/actor_on_cuda", float(next(self.parameters()).is_cuda))
            return action, logp, value

    def watched_update(agent, *args, **kwargs):
        wb.log("test/learner_on_cuda", float(next(agent.parameters()).is_cuda))
        return ppo_continuous.ppo_continuous_update(agent, *args, **kwargs)

    cfg = dataclasses.replace(
        ppo_continuous.PPOContinuousConfig(),
        env_id="Pendulum-v1",
        env_backend="gymnasium",
        num_envs=4,
        num_steps=64,
        num_minibatches=4,
        update_epochs=2,
    )
    namespace = dict(vars(ppo_continuous), cfg=cfg, GaussianActorCritic=Watched, ppo_continuous_update=watched_update)
    run = ppo_continuous.build_fdg(namespace).run(
        iterations=4, steps=cfg.num_steps, policy="gpuonly", cluster=cluster, progress=False
    )
    assert run.status == "finished"
    for name in ("test/actor_in_and_out_on_host", "test/actor_on_cuda", "test/learner_on_cuda"):
        _all_ones(run, name, iterations=4)
    assert np.isfinite(run.metrics["losses/value_loss"]).all() and np.isfinite(run.metrics["losses/policy_loss"]).all()
    assert run.env_steps == 4 * 4 * 64
    assert len(run.episode_returns) == 4  # Pendulum's 200-step episodes: one per env in 256 steps
