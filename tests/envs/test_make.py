"""`make` and the gymnasium-backed envs: dispatch, errors, same-step autoreset."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from workbench.envs import CartPole, GymVectorEnv, ThreadedVectorEnv, VectorEnv, make


def test_make_dispatch():
    assert isinstance(make("CartPole-v1", 2), CartPole)
    assert isinstance(make("CartPole-v1", 2, backend="numpy"), CartPole)
    assert isinstance(make("CartPole-v1", 2, backend="gymnasium"), GymVectorEnv)
    acrobot = make("Acrobot-v1", 2, seed=0, backend="gymnasium")  # auto: EnvPool when installed
    assert isinstance(acrobot, GymVectorEnv) and isinstance(acrobot, VectorEnv)
    assert acrobot.observation_shape == (6,)
    threaded = make(lambda: gymnasium.make("Acrobot-v1"), 3, threads=2)
    assert isinstance(threaded, ThreadedVectorEnv)
    threaded.close()


def test_unknown_id_suggests_close_matches():
    with pytest.raises(ValueError, match=r"unknown environment id 'CartPol-v1'.*'CartPole-v1'"):
        make("CartPol-v1", 2)
    with pytest.raises(ValueError, match="gymnasium.registry"):
        make("NoSuchThingAtAll-v9", 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_envs": 0}, "num_envs"),
        ({"num_envs": 2, "backend": "tpu"}, "backend"),
        ({"num_envs": 2, "threads": 0}, "threads"),
    ],
)
def test_make_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make("CartPole-v1", **kwargs)


def test_array_backend_for_an_id_without_one_is_an_error():
    with pytest.raises(ValueError, match="no array implementation"):
        make("Acrobot-v1", 2, backend="numpy")
    with pytest.raises(TypeError, match="gymnasium id"):
        make(42, 2)


def test_gym_vector_env_same_step_autoreset():
    env = make("CartPole-v1", 4, seed=0, backend="gymnasium")
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (4, 4)
    episodes = 0
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(np.ones(4, np.int64))
        done = terminated | truncated
        assert reward.dtype == np.float32 and info["final_obs"].shape == (4, 4)
        # Same-step: a done env's obs is already a fresh start, never a dummy step.
        assert np.all(np.abs(obs[done]) <= 0.05)
        final = info["final_obs"][done]
        assert np.all((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2094))
        np.testing.assert_array_equal(info["final_obs"][~done], obs[~done])
        episodes += len(info["episode_return"])
        np.testing.assert_array_equal(info["episode_return"], info["episode_length"])
    assert episodes > 20
    env.close()


def test_gym_vector_env_matches_array_cartpole_dynamics():
    # Same start states and actions: the two backends agree on everything but resets.
    gym_env = make("CartPole-v1", 8, seed=3, backend="gymnasium")
    gym_env.reset()
    array_env = CartPole(8, seed=0)
    array_env.set_state(np.stack([e.unwrapped.state for e in gym_env._vec.envs]))
    for t in range(8):
        actions = np.full(8, t % 2)
        g = gym_env.step(actions)
        a = array_env.step(actions)
        np.testing.assert_array_equal(g[0], a[0])


def test_threaded_equals_sequential_with_same_seed():
    factory = lambda: gymnasium.make("CartPole-v1")  # noqa: E731
    sequential = GymVectorEnv(factory, 7, seed=11)
    threaded = ThreadedVectorEnv(factory, 7, threads=3, seed=11)
    np.testing.assert_array_equal(sequential.reset(), threaded.reset())
    rng = np.random.default_rng(0)
    returns = 0
    for _ in range(300):
        actions = rng.integers(0, 2, size=7)
        s, t = sequential.step(actions), threaded.step(actions)
        for a, b in zip(s[:4], t[:4]):
            np.testing.assert_array_equal(a, b)
        for key in ("final_obs", "episode_return", "episode_length"):
            np.testing.assert_array_equal(s[4][key], t[4][key])
        returns += len(t[4]["episode_return"])
    assert returns > 50
    threaded.close()
    threaded.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        threaded.step(np.zeros(7, np.int64))
