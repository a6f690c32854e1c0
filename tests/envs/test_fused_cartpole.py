"""The GPU CartPole's NumPy twin (what CI can run of `FusedCartPole`): the same dynamics as
the gymnasium-exact CartPole, the counter-based reset stream, episode stats that stay on the
env's device until read, state that pickles and checkpoints, and bad actions refused. The
kernel itself is compared with this twin in tests/gpu/test_fused_cartpole_gpu.py."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from workbench.envs import CartPole, FusedCartPole, make
from workbench.envs.cartpole_device import reset_draws, seed_key
from workbench.envs.episodes import EndedEpisodes


def _balance(obs):
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_steps_are_the_gymnasium_exact_cartpoles_bit_for_bit():
    fused, exact = FusedCartPole(64, seed=1), CartPole(64, seed=9)
    fused.reset()
    exact.reset()
    rng = np.random.default_rng(0)
    for _ in range(300):
        exact.set_state(fused.state, fused._elapsed)
        actions = rng.integers(0, 2, 64)
        a = fused.step(actions)
        b = exact.step(actions)
        ended = a[2] | a[3]
        np.testing.assert_array_equal(a[4]["final_obs"], b[4]["final_obs"])  # every env's last obs
        np.testing.assert_array_equal(a[0][~ended], b[0][~ended])  # resets differ: other streams
        for i in (1, 2, 3):
            np.testing.assert_array_equal(a[i], b[i])


def test_resets_come_from_the_counter_stream():
    env = FusedCartPole(5, seed=7)
    first = env.reset()
    np.testing.assert_array_equal(env.state, reset_draws(seed_key(7), np.arange(5), np.zeros(5)))
    np.testing.assert_array_equal(first, env.state.astype(np.float32))
    assert (np.abs(env.state) <= 0.05).all()
    env.reset()  # no seed: every env's next episode
    np.testing.assert_array_equal(env.state, reset_draws(seed_key(7), np.arange(5), np.ones(5)))
    env.reset(seed=7)  # a seed restarts the stream
    np.testing.assert_array_equal(env.state, reset_draws(seed_key(7), np.arange(5), np.zeros(5)))
    draws = [reset_draws(seed_key(s), np.arange(4), np.arange(4)) for s in (0, 1)]
    assert len({v for d in draws for v in d.ravel().tolist()}) == 32  # seeds, envs, episodes differ


def test_an_autoreset_draws_the_envs_next_episode():
    env = FusedCartPole(16, seed=3)
    env.reset()
    for _ in range(600):
        episodes_before = env._episodes.copy()
        obs, _, terminated, truncated, info = env.step(np.zeros(16, np.int64))  # push left: falls
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            expected = reset_draws(seed_key(3), ended, episodes_before[ended] + 1)
            np.testing.assert_array_equal(env.state[ended], expected)
            np.testing.assert_array_equal(obs[ended], expected.astype(np.float32))
    assert env._episodes.min() >= 10


def test_episode_stats_are_the_ended_episodes_lengths():
    env = FusedCartPole(32, seed=0)
    obs = env.reset()
    lengths, truncations = [], 0
    rng = np.random.default_rng(0)
    for _ in range(1200):
        actions = _balance(obs)
        actions[:8] = rng.integers(0, 2, 8)  # these fall early; the rest run to the time limit
        obs, reward, terminated, truncated, info = env.step(actions)
        assert isinstance(info["episode_return"], EndedEpisodes)
        done = terminated | truncated
        assert len(info["episode_length"]) == done.sum()
        np.testing.assert_array_equal(
            np.asarray(info["episode_return"]), np.asarray(info["episode_length"]).astype(np.float32)
        )
        lengths += info["episode_length"].tolist()
        truncations += int(truncated.sum())
    assert truncations > 0 and max(lengths) == 500 and min(lengths) < 500


def test_pickle_copy_and_checkpoint_continue_the_same_streams():
    env = FusedCartPole(8, seed=2)
    obs = env.reset()
    for _ in range(40):
        obs = env.step(_balance(obs))[0]
    copies = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    loaded = FusedCartPole(8, seed=99)
    loaded.reset()
    loaded.load_state_dict(env.state_dict())
    copies.append(loaded)
    for _ in range(700):  # several autoresets each
        actions = _balance(obs)
        obs = env.step(actions)[0]
        for other in copies:
            np.testing.assert_array_equal(other.step(actions)[0], obs)


@pytest.mark.parametrize(
    "actions, match",
    [
        (np.full(4, 2), "out of range"),
        (np.array([0, 1, -1, 0]), "out of range"),
        (np.zeros(4, np.float32), "integer values"),
        (np.zeros(5, np.int64), "shape"),
    ],
)
def test_bad_actions_are_refused_with_the_fix(actions, match):
    env = FusedCartPole(4, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=match):
        env.step(actions)


def test_step_before_reset_says_so():
    with pytest.raises(RuntimeError, match="reset"):
        FusedCartPole(2).step(np.zeros(2, np.int64))


def test_make_puts_array_envs_on_the_replicas_device():
    assert type(make("CartPole-v1", 4, device="cpu")) is CartPole
    with pytest.raises(ValueError, match="replica.device"):
        make("CartPole-v1", 4, device="tpu")
    from workbench.kernels import gpu_available

    if not gpu_available():
        with pytest.raises(RuntimeError, match="none is usable"):
            make("CartPole-v1", 4, device="cuda:0")
