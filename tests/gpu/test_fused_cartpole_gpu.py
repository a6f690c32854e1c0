"""The fused CartPole kernel on a real GPU against its NumPy twin, device-side episode
stats through wb.log, and PPO with env, actor and learner on the GPU end to end (skipped
without CUDA + CuPy; the twin's own tests are tests/envs/test_fused_cartpole.py)."""

from __future__ import annotations

import copy
import logging
import pickle

import numpy as np
import pytest

from tests.gpu import ON_GPU


pytestmark = ON_GPU


def _balance(obs):
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_kernel_matches_its_numpy_twin():
    import cupy

    from workbench.envs import FusedCartPole

    n = 4096
    gpu, twin = FusedCartPole(n, seed=11, xp=cupy), FusedCartPole(n, seed=11)
    obs = gpu.reset()
    np.testing.assert_array_equal(cupy.asnumpy(obs), twin.reset())  # the same draws, bit for bit
    np.testing.assert_array_equal(cupy.asnumpy(gpu.state), twin.state)
    rng = np.random.default_rng(0)
    for t in range(300):
        actions = _balance(cupy.asnumpy(obs))
        actions[: n // 4] = rng.integers(0, 2, n // 4)
        # the twin starts each step from the kernel's state (sin/cos differ in the last bit)
        twin._state[...] = cupy.asnumpy(gpu._state)
        twin._elapsed[...] = cupy.asnumpy(gpu._elapsed)
        twin._episodes[...] = cupy.asnumpy(gpu._episodes)
        obs, reward, terminated, truncated, info = gpu.step(cupy.asarray(actions))
        t_obs, t_reward, t_term, t_trunc, t_info = twin.step(actions)
        np.testing.assert_allclose(cupy.asnumpy(info["final_obs"]), t_info["final_obs"], rtol=0, atol=1e-6)
        same = cupy.asnumpy(terminated) == t_term  # a threshold crossed within rounding may differ
        assert same.mean() > 0.999
        ended = cupy.asnumpy(terminated | truncated) & (t_term | t_trunc)
        np.testing.assert_array_equal(cupy.asnumpy(obs)[ended], t_obs[ended])  # resets: bit for bit
        np.testing.assert_array_equal(cupy.asnumpy(reward), t_reward)


def test_out_of_range_actions_are_caught_within_check_every_steps():
    import cupy

    from workbench.envs import FusedCartPole

    env = FusedCartPole(64, seed=0, xp=cupy, check_every=4)
    env.reset()
    actions = cupy.zeros(64, cupy.int64)
    actions[3] = 7
    with pytest.raises(ValueError, match="out of range in one of the last 4 steps"):
        for _ in range(4):
            env.step(actions)


def test_snapshot_and_checkpoint_continue_on_the_device():
    import cupy

    from workbench.envs import FusedCartPole

    env = FusedCartPole(32, seed=5, xp=cupy)
    obs = env.reset()
    for _ in range(30):
        obs = env.step(cupy.asarray(_balance(cupy.asnumpy(obs))))[0]
    copies = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    assert all(c.xp is cupy for c in copies)
    for _ in range(600):
        actions = cupy.asarray(_balance(cupy.asnumpy(obs)))
        obs = env.step(actions)[0]
        for c in copies:
            cupy.testing.assert_array_equal(c.step(actions)[0], obs)


def test_device_episode_stats_reach_the_run_once_per_iteration():
    import cupy

    import workbench as wb
    from workbench.envs import FusedCartPole

    fdg = wb.FDG(namespace={"wb": wb, "np": np, "cupy": cupy, "FusedCartPole": FusedCartPole})
    fdg.add_fragment("env", "envs = FusedCartPole(256, seed=1, xp=cupy)\nobs = envs.reset()", rate="init")
    fdg.add_fragment("actor", "action = (obs[:, 2] > 0).astype(cupy.int64)", rate="step")
    fdg.add_fragment(
        "env",
        "obs, reward, terminated, truncated, info = envs.step(action)\n"
        "wb.log('charts/episodic_return', info['episode_return'])\n"
        "wb.log('device/reward_sum', reward.sum())",
        rate="step",
    )
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    run = fdg.run(iterations=20, steps=50, progress=False)
    assert run.status == "finished"
    assert len(run.episode_returns) > 256 and all(1 <= r <= 500 for r in run.episode_returns)
    assert run.metrics["device/reward_sum"].tolist() == [256.0] * 20


def test_ppo_with_env_and_learner_on_the_gpu():
    import cupy
    from distributed import Client, LocalCluster

    import workbench as wb
    from workbench.algorithms import ppo

    class Watched(ppo.ActorCritic):
        def act(self, obs):
            action, logp, value = super().act(obs)
            wb.log(
                "test/actor_in_and_out_on_device",
                float(isinstance(obs, cupy.ndarray) and isinstance(action, cupy.ndarray)),
            )
            return action, logp, value

    cfg = ppo.PPOConfig(num_envs=1024)
    namespace = dict(vars(ppo), ActorCritic=Watched, cfg=cfg)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        run = ppo.build_fdg(namespace).run(
            iterations=6, steps=cfg.num_steps, policy="gpuonly", cluster=client, progress=False
        )
    assert run.metrics["test/actor_in_and_out_on_device"].tolist() == [1.0] * 6
    assert np.isfinite(run.metrics["losses/value_loss"]).all()
    assert run.env_steps == 6 * 1024 * cfg.num_steps
    assert len(run.episode_returns) > 0
