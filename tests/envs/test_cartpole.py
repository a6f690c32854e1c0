"""The array CartPole against gymnasium's CartPole-v1, step for step."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from workbench.envs import CartPole, VectorEnv, make
from workbench.envs.cartpole import MAX_EPISODE_STEPS


def noisy_controller(obs: np.ndarray, rng: np.random.Generator, eps: float) -> np.ndarray:
    """Balances the pole (episodes reach the 500-step limit) except on random eps-steps."""
    balanced = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)
    random = rng.integers(0, 2, size=len(obs))
    return np.where(rng.random(len(obs)) < eps, random, balanced)


def gym_cartpoles(num_envs: int) -> list[gymnasium.Env]:
    envs = [gymnasium.make("CartPole-v1") for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=1000 + i)
    return envs


def test_matches_gymnasium_step_for_step_with_autoreset_and_truncation():
    num_envs, steps = 16, 3000
    rng = np.random.default_rng(0)
    envs = gym_cartpoles(num_envs)
    array_env = CartPole(num_envs, seed=1)
    array_env.set_state(np.stack([e.unwrapped.state for e in envs]))
    obs = np.stack([np.asarray(e.unwrapped.state, np.float32) for e in envs])
    seen_terminated = seen_truncated = 0

    for _ in range(steps):
        actions = noisy_controller(obs, rng, eps=0.2)
        obs, reward, terminated, truncated, info = array_env.step(actions)
        assert obs.dtype == np.float32 and reward.dtype == np.float32
        assert terminated.dtype == bool and truncated.dtype == bool
        for i, env in enumerate(envs):
            g_obs, g_reward, g_term, g_trunc, _ = env.step(int(actions[i]))
            done = g_term or g_trunc
            # Bit-identical, not approximately equal: the dynamics are the same expressions.
            np.testing.assert_array_equal(info["final_obs"][i] if done else obs[i], g_obs)
            assert (reward[i], terminated[i], truncated[i]) == (g_reward, g_term, g_trunc)
            if done:
                # Our env drew its own fresh start; make gymnasium's env start there too.
                env.reset()
                env.unwrapped.state = array_env.state[i].copy()
                np.testing.assert_array_equal(obs[i], array_env.state[i].astype(np.float32))
        seen_terminated += int(terminated.sum())
        seen_truncated += int(truncated.sum())
    assert seen_terminated > 10 and seen_truncated > 10  # both endings were exercised


def test_single_env_equals_gymnasium_with_same_seed_including_resets():
    # With one env, our generator is built like gymnasium's np_random(seed), so even
    # the autoreset starts coincide: no state copying needed.
    rng = np.random.default_rng(1)
    env = gymnasium.make("CartPole-v1")
    g_obs, _ = env.reset(seed=42)
    array_env = CartPole(1, seed=42)
    obs = array_env.reset()
    np.testing.assert_array_equal(obs[0], g_obs)
    endings = 0
    for _ in range(2000):
        action = noisy_controller(obs, rng, eps=0.1)
        obs, reward, terminated, truncated, info = array_env.step(action)
        g_obs, g_reward, g_term, g_trunc, _ = env.step(int(action[0]))
        assert (reward[0], terminated[0], truncated[0]) == (g_reward, g_term, g_trunc)
        if g_term or g_trunc:
            endings += 1
            np.testing.assert_array_equal(info["final_obs"][0], g_obs)
            g_obs, _ = env.reset()
        np.testing.assert_array_equal(obs[0], g_obs)
    assert endings >= 3


def test_truncates_at_500_steps_even_when_terminating():
    env = CartPole(2, seed=0)
    env.reset()
    # Env 0 falls on its 500th step: both flags, like gymnasium's TimeLimit.
    env.set_state(np.array([[2.399, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), [499, 499])
    _, _, terminated, truncated, info = env.step(np.array([1, 1]))
    assert terminated.tolist() == [True, False]
    assert truncated.tolist() == [True, True]
    assert info["episode_length"].tolist() == [500, 500]
    assert env.elapsed_steps.tolist() == [0, 0]


def test_reset_distribution_bounds():
    env = CartPole(4096, seed=3)
    obs = env.reset()
    assert obs.shape == (4096, 4) and obs.dtype == np.float32
    assert np.all(obs >= -0.05) and np.all(obs <= 0.05)
    # Uniform, not a constant: spread fills the interval in every coordinate.
    assert np.all(obs.min(axis=0) < -0.049) and np.all(obs.max(axis=0) > 0.049)
    assert abs(float(obs.mean())) < 0.002


def test_seeding_is_reproducible():
    def rollout(seed: int) -> np.ndarray:
        env = CartPole(64, seed=seed)
        out = [env.reset()]
        for t in range(300):
            out.append(env.step(np.full(64, t % 2))[0])
        return np.stack(out)

    np.testing.assert_array_equal(rollout(5), rollout(5))
    assert not np.array_equal(rollout(5), rollout(6))
    env = CartPole(8, seed=0)
    np.testing.assert_array_equal(env.reset(seed=9), CartPole(8, seed=9).reset())


def test_episode_stats_match_a_manual_count():
    num_envs = 32
    env = CartPole(num_envs, seed=0)
    obs = env.reset()
    rng = np.random.default_rng(0)
    running = np.zeros(num_envs)
    expected_returns, got_returns, got_lengths = [], [], []
    for _ in range(600):
        obs, reward, terminated, truncated, info = env.step(noisy_controller(obs, rng, 0.5))
        running += reward
        done = terminated | truncated
        expected_returns.extend(running[done])
        running[done] = 0
        assert info["episode_return"].dtype == np.float32
        assert info["episode_return"].shape == info["episode_length"].shape == (done.sum(),)
        got_returns.extend(info["episode_return"])
        got_lengths.extend(info["episode_length"])
    assert len(expected_returns) > 50
    np.testing.assert_array_equal(got_returns, expected_returns)
    np.testing.assert_array_equal(got_lengths, expected_returns)  # reward 1 per step
    assert max(got_lengths) <= MAX_EPISODE_STEPS


def test_protocol_and_shapes():
    env = make("CartPole-v1", 3, seed=0)
    assert isinstance(env, CartPole) and isinstance(env, VectorEnv)
    assert env.num_envs == 3 and env.observation_shape == (4,) and env.xp is np
    assert env.action_space == gymnasium.spaces.Discrete(2)
    env.reset()
    obs, *_ = env.step(np.zeros((3, 1), np.int64))  # [N, 1] actions are accepted
    assert obs.shape == (3, 4) and obs.flags.c_contiguous
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4, np.int64))
    with pytest.raises(RuntimeError, match="reset"):
        CartPole(2).step(np.zeros(2, np.int64))


@pytest.mark.gpu
def test_cupy_cartpole_matches_numpy_twin():
    from workbench.kernels import gpu_available

    if not gpu_available():
        pytest.skip("no usable CUDA GPU with CuPy")
    import cupy

    numpy_env, cupy_env = CartPole(256, seed=0), CartPole(256, seed=0, xp=cupy)
    assert type(make("CartPole-v1", 4, backend="cupy")).__name__ == "FusedCartPole"  # make's GPU CartPole
    assert cupy_env.xp is cupy
    numpy_env.reset()
    cupy_env.reset()
    cupy_env.set_state(cupy.asarray(numpy_env.state))
    rng = np.random.default_rng(0)
    fresh = np.ones(256, bool)  # envs still in their first episode (resets differ: two RNGs)
    for _ in range(50):
        actions = rng.integers(0, 2, size=256)
        n_obs, _, n_term, _, n_info = numpy_env.step(actions)
        c_obs, _, c_term, _, c_info = cupy_env.step(cupy.asarray(actions))
        final = np.where(n_term[:, None], n_info["final_obs"], n_obs)
        c_final = cupy.asnumpy(cupy.where(c_term[:, None], c_info["final_obs"], c_obs))
        # GPU sin/cos may differ from the CPU's in the last bit.
        np.testing.assert_allclose(c_final[fresh], final[fresh], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(cupy.asnumpy(c_term)[fresh], n_term[fresh])
        fresh &= ~n_term
    assert fresh.sum() < 256  # some episodes ended on the way


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64])
def test_every_discrete_action_dtype_steps_as_int64_does(dtype):
    # the step indexes a table of forces by the action: bools and every integer width
    # must push the same way as int64 0/1 (a bool used as an index would be a mask)
    rng = np.random.default_rng(3)
    reference, other = CartPole(8, seed=5), CartPole(8, seed=5)
    reference.reset(), other.reset()
    for _ in range(200):
        actions = rng.integers(0, 2, size=8)
        expected = reference.step(actions.astype(np.int64))
        got = other.step(actions.astype(dtype))
        for a, b in zip(expected[:4], got[:4]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "bad",
    [np.array([0, 2, 0]), np.array([-1, 0, 1], np.int8), np.array([0, 0, 256], np.uint16), np.array([0, 1, -(2**62)])],
)
def test_an_action_outside_0_1_is_refused_for_every_integer_width(bad):
    env = CartPole(3, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="must be 0 .push left. or 1"):
        env.step(bad)


def test_rewards_are_fresh_arrays_so_a_cell_may_scale_them_in_place():
    env = CartPole(4, seed=0)
    env.reset()
    first = env.step(np.ones(4, np.int64))[1]
    first *= 0.01  # a user's reward scaling, in place
    second = env.step(np.ones(4, np.int64))[1]
    assert second.tolist() == [1.0] * 4 and second is not first


def test_an_env_pickled_before_its_step_constants_existed_still_steps():
    # a checkpoint written by an older workbench holds the env without the arrays the
    # step now makes once: unpickling makes them again
    import pickle

    env = CartPole(4, seed=0)
    env.reset()
    state = env.__getstate__()
    for derived in ("_forces", "_rewards"):  # as an older workbench pickled it
        state.pop(derived, None)
    old = CartPole.__new__(CartPole)
    old.__setstate__(state)
    twin = pickle.loads(pickle.dumps(env))
    actions = np.array([0, 1, 1, 0])
    np.testing.assert_array_equal(old.step(actions)[0], twin.step(actions)[0])
