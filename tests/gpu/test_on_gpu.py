"""End to end on a real GPU (skipped without CUDA + CuPy): a GPUOnly PPO run whose learner
trains on CUDA, the CuPy CartPole over many episodes, and a CuPy env's snapshot/resume.
Their CPU twins: tests/gpu/test_placement_cpu.py, tests/envs/test_device_state.py,
tests/runtime/test_wire_devices.py."""

from __future__ import annotations

import copy
import logging
import pickle

import numpy as np

from tests.gpu import ON_GPU


pytestmark = ON_GPU


def _balance(obs):
    """A controller that keeps most poles up for the 500-step limit (so episodes truncate)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_gpuonly_ppo_trains_on_cuda():
    from distributed import Client, LocalCluster

    import workbench as wb
    from workbench.algorithms import ppo

    def ppo_update_on(agent, *args, **kwargs):
        wb.log("test/learner_on_cuda", float(ppo.device_of(agent).type == "cuda"))
        return ppo.ppo_update(agent, *args, **kwargs)

    namespace = dict(vars(ppo), ppo_update=ppo_update_on)
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
        from workbench.cluster.connect import inventory_of

        assert inventory_of(client).gpu_workers(), "the worker did not report its GPU"
        run = ppo.build_fdg(namespace).run(iterations=4, steps=16, policy="gpuonly", cluster=client, progress=False)
    assert run.metrics["test/learner_on_cuda"].tolist() == [1.0] * 4
    assert np.isfinite(run.metrics["losses/value_loss"]).all()


def test_cupy_cartpole_over_many_episodes_with_truncation_and_stats():
    import cupy

    from workbench.envs import CartPole

    env, twin = CartPole(64, seed=3, xp=cupy), CartPole(64, seed=3)
    obs, obs_np = env.reset(), twin.reset()
    np.testing.assert_array_equal(cupy.asnumpy(obs), obs_np)  # host-drawn resets: identical
    lengths, truncations = [], 0
    for t in range(1200):
        actions = _balance(cupy.asnumpy(obs))
        obs, reward, terminated, truncated, info = env.step(cupy.asarray(actions))
        if t < 20:  # CUDA's sin/cos: close to the NumPy twin, not bit-identical
            obs_np = twin.step(actions)[0]
            np.testing.assert_allclose(cupy.asnumpy(obs), obs_np, rtol=1e-5, atol=1e-6)
        truncations += int(truncated.sum())
        ended = cupy.asnumpy(terminated | truncated)
        assert isinstance(info["episode_length"], np.ndarray)
        assert info["episode_length"].size == ended.sum()
        np.testing.assert_array_equal(info["episode_return"], info["episode_length"].astype(np.float32))
        lengths.extend(info["episode_length"].tolist())
    assert truncations > 0 and 500 in lengths and max(lengths) == 500
    assert len(lengths) >= 64  # every env finished at least one episode, most several


def test_cupy_env_snapshot_and_resume():
    import cupy

    from workbench.envs import CartPole, SimpleSpread
    from workbench.runtime.transport.channels import dumps_state
    from workbench.runtime.state.portable import encode_state, restore_into

    for env in (CartPole(32, seed=5, xp=cupy), SimpleSpread(16, seed=5, xp=cupy)):
        env.reset()
        act = (
            (lambda t: cupy.arange(32) % 2)
            if isinstance(env, CartPole)
            else (lambda t: (cupy.arange(16 * 3).reshape(16, 3) + t) % 5)
        )
        for t in range(10):
            env.step(act(t))
        snapshot = pickle.loads(dumps_state(env))
        twin = copy.deepcopy(env)
        saved, skipped = encode_state({"envs": env})
        assert skipped == []
        fresh = type(env)(env.num_envs, seed=99, xp=cupy)
        fresh.reset()
        restore_into({"envs": fresh}, saved)
        for copy_ in (snapshot, twin, fresh):
            assert copy_.xp is cupy and copy_._rng is not env._rng
        for t in range(60):  # several autoresets: the random streams continue identically
            expected = env.step(act(t))[0]
            for copy_ in (snapshot, twin, fresh):
                cupy.testing.assert_array_equal(copy_.step(act(t))[0], expected)


def test_cuda_values_on_the_wire_keep_their_device():
    import cupy
    import torch

    from workbench.runtime.transport.channels import dumps

    back = pickle.loads(dumps({"t": torch.arange(4.0, device="cuda:0"), "c": cupy.arange(3)}))
    assert back["t"].device.type == "cuda" and isinstance(back["c"], cupy.ndarray)


def test_detection_and_the_inventory_find_this_hosts_gpus():
    """What test_placement_cpu.py's real-detection tests stand in for on a GPU host: detection
    finds the host's GPUs (as torch counts them), and a worker reports them to the inventory
    with no ``--resources GPU=N``."""
    import torch
    from distributed import Client, LocalCluster

    from workbench.cluster.connect import inventory_of
    from workbench.cluster.gpus import detect_worker_gpus

    count = torch.cuda.device_count()
    assert detect_worker_gpus({}, {}) == count
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        assert [w.gpus for w in inventory_of(client).workers] == [count]


def test_simple_spread_resets_on_the_device_as_its_numpy_twin(monkeypatch):
    """make() on a GPU gives SimpleSpread's counter resets: the kernel's draws are the NumPy
    twin's bits, a step never reads which envs ended back to the host, and the episode
    stats stay on the device until read."""
    import cupy

    from workbench.envs import SimpleSpread, counter_rng, make, simple_spread
    from workbench.envs.episodes import EndedEpisodes

    key, envs = counter_rng.seed_key(5), np.arange(1000)
    episodes = (envs % 7).astype(np.uint32)
    cupy.testing.assert_array_equal(
        counter_rng.uniforms(key, cupy.asarray(envs), cupy.asarray(episodes), 12, cupy),
        counter_rng.uniforms(key, envs, episodes, 12),
    )

    def host_read(*args):
        raise AssertionError("a CuPy step read which envs ended back to the host")

    monkeypatch.setattr(simple_spread, "ended_envs", host_read)
    env = make("simple_spread_v3", 64, seed=5, device="cuda:0")
    twin = SimpleSpread(64, seed=5, resets="counter")
    assert env.xp is cupy and env._resets == "counter"
    cupy.testing.assert_array_equal(env.reset(), twin.reset())  # starts: the same bits
    ended = 0
    for t in range(60):  # two truncations of the whole team
        actions = (cupy.arange(64 * 3).reshape(64, 3) + t) % 5
        obs, reward, terminated, truncated, info = env.step(actions)
        obs_np, reward_np, _, _, info_np = twin.step(actions.get())
        assert isinstance(info["episode_return"], EndedEpisodes) and not info["episode_return"].on_host
        np.testing.assert_allclose(obs.get(), obs_np, rtol=1e-5, atol=1e-4)  # CUDA's sqrt, exp
        np.testing.assert_allclose(np.asarray(info["episode_return"]), np.asarray(info_np["episode_return"]), rtol=1e-4)
        ended += len(info["episode_return"])
    assert ended == 2 * 64
