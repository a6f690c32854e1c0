"""`EnvPoolVectorEnv` and `make`'s choice of it: EnvPool's dynamics are gymnasium's (same state,
same action, same next state and reward), the same-step autoreset the protocol promises is
kept on top of EnvPool's next-step one, and the step count is EnvPool's own."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("envpool", reason="EnvPool is optional: pip install 'workbench-rl[envpool]'")

import gymnasium  # noqa: E402

from workbench.envs import (  # noqa: E402
    CartPole,
    EnvPoolVectorEnv,
    GymVectorEnv,
    SimpleSpread,
    VectorEnv,
    make,
)


def test_make_picks_envpool_for_the_ids_it_has():
    cheetah = make("HalfCheetah-v5", 2, seed=0)
    assert isinstance(cheetah, EnvPoolVectorEnv) and isinstance(cheetah, VectorEnv)
    assert cheetah.observation_shape == (17,) and cheetah.action_space.shape == (6,)
    cheetah.close()
    assert isinstance(make("CartPole-v1", 2), CartPole)  # the NumPy env is faster still
    assert isinstance(make("simple_spread_v3", 2), SimpleSpread)
    assert isinstance(make("HalfCheetah-v5", 2, backend="gymnasium"), GymVectorEnv)
    explicit = make("CartPole-v1", 2, backend="envpool", threads=1)
    assert isinstance(explicit, EnvPoolVectorEnv)
    explicit.close()
    assert isinstance(make(lambda: gymnasium.make("Pendulum-v1"), 2), GymVectorEnv)
    with pytest.raises(ValueError, match="EnvPool has no environment 'simple_spread_v3'"):
        make("simple_spread_v3", 2, backend="envpool")
    with pytest.raises(ValueError, match="a factory is Python code"):
        make(lambda: gymnasium.make("Pendulum-v1"), 2, backend="envpool")


def test_cartpole_dynamics_are_gymnasium_s():
    """Every step of EnvPool's CartPole from the state it reports is the NumPy CartPole's (itself
    checked against gymnasium's in test_make), ended episodes included."""
    env = EnvPoolVectorEnv("CartPole-v1", 8, seed=3, threads=1)
    obs = env.reset()
    reference = CartPole(8, seed=0)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(150):
        actions = rng.integers(0, 2, size=8)
        reference.set_state(obs.astype(np.float64))
        expected, exp_reward, exp_term, _, exp_info = reference.step(actions)
        obs, reward, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        # EnvPool steps in float64, the protocol hands float32: compare at float32's precision
        np.testing.assert_allclose(info["final_obs"][done], exp_info["final_obs"][done], atol=1e-5)
        np.testing.assert_allclose(obs[~done], expected[~done], atol=1e-5)
        np.testing.assert_array_equal(terminated, exp_term)
        np.testing.assert_array_equal(reward, exp_reward)
        ended += int(done.sum())
    assert ended > 30
    env.close()


def test_halfcheetah_step_is_gymnasium_s():
    """From EnvPool's state (qpos without x, qvel: the observation) gymnasium's HalfCheetah-v5
    takes the same action to the same next observation and reward."""
    env = EnvPoolVectorEnv("HalfCheetah-v5", 4, seed=0, threads=1)
    obs = env.reset()
    gym_env = gymnasium.make("HalfCheetah-v5").unwrapped
    gym_env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        actions = rng.uniform(-1, 1, size=(4, 6)).astype(np.float32)
        expected = []
        for i in range(4):
            gym_env.set_state(np.concatenate([[0.0], obs[i, :8]]), obs[i, 8:].astype(np.float64))
            next_obs, reward, *_ = gym_env.step(actions[i])
            expected.append((next_obs, reward))
        obs, reward, *_ = env.step(actions)
        np.testing.assert_allclose(obs, np.stack([o for o, _ in expected]), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(reward, [r for _, r in expected], rtol=1e-3, atol=1e-3)
    env.close()


def test_same_step_autoreset_and_counts_from_envpool_s_counters():
    env = make("CartPole-v1", 6, seed=1, backend="envpool", threads=1)
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (6, 4)
    lengths = []
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step(np.ones(6, np.int64))
        done = terminated | truncated
        assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == np.bool_
        assert np.all(np.abs(obs[done]) <= 0.05)  # already the next episode's start
        final = info["final_obs"][done]
        assert np.all((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2094))
        np.testing.assert_array_equal(info["final_obs"][~done], obs[~done])
        np.testing.assert_array_equal(info["episode_return"], info["episode_length"])
        np.testing.assert_array_equal(info["episode_length"], info["elapsed_step"][done])
        lengths.extend(info["episode_length"].tolist())
        current = np.where(done, 0, info["elapsed_step"])
    # EnvPool's own counters add up to every step taken, and no reset step is among them
    assert env.steps_taken == 6 * 300 == sum(lengths) + int(current.sum())
    assert len(lengths) > 100
    env.close()


def test_send_recv_is_step_and_seeds_reproduce():
    a = EnvPoolVectorEnv("Pendulum-v1", 3, seed=5, threads=1)
    b = EnvPoolVectorEnv("Pendulum-v1", 3, seed=7, threads=1)
    np.testing.assert_array_equal(a.reset(), b.reset(seed=5))  # reseeded: rebuilt at 5
    actions = np.full((3, 1), 0.5, np.float32)
    a.send(actions)
    with pytest.raises(RuntimeError, match="send called twice"):
        a.send(actions)
    got, want = a.recv(), b.step(actions)
    for x, y in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(RuntimeError, match="recv called without a send"):
        a.recv()
    with pytest.raises(ValueError, match="expects actions of shape"):
        a.step(np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="cannot be pickled.*init cell"):
        pickle.dumps(a)
    a.close(), b.close()
    a.close()  # idempotent
