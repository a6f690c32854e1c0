"""SimpleSpread with ``resets="counter"``: starts drawn from (seed, env, episode) so that a
GPU step never reads back to the host. The NumPy path resets the ended envs by index, the
device path by masks (run here on NumPy under another module's name): both must give the
same bits, and the dynamics must be mpe2-mode's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.envs.test_device_state import device_like_numpy
from workbench.envs import counter_rng, make
from workbench.envs.episodes import EndedEpisodes
from workbench.envs import simple_spread
from workbench.envs.simple_spread import SimpleSpread

AGENTS = 3


def expected_start(seed: int, env: int, episode: int, agents: int = AGENTS):
    """(agent positions, landmark positions) of ``env``'s ``episode``, from the generator."""
    u = counter_rng.uniforms(counter_rng.seed_key(seed), np.array([env]), np.array([episode], np.uint32), 4 * agents)
    draw = (-1.0 + 2.0 * u).reshape(2 * agents, 2)
    return draw[:agents], draw[agents:]


def actions(num_envs: int, t: int) -> np.ndarray:
    return (np.arange(num_envs * AGENTS).reshape(num_envs, AGENTS) * 7 + t) % 5


def trajectory(env: SimpleSpread, steps: int) -> list[tuple[np.ndarray, ...]]:
    out = []
    for t in range(steps):
        obs, reward, terminated, truncated, info = env.step(actions(env.num_envs, t))
        out.append(
            (
                obs.copy(),
                reward.copy(),
                terminated.copy(),
                truncated.copy(),
                np.asarray(info["final_obs"]).copy(),
                np.array(info["episode_return"]),
                np.array(info["episode_length"]),
            )
        )
    return out


def staggered(env: SimpleSpread, seed: int = 0) -> SimpleSpread:
    """The env mid-episode at a different step in every env, some of them covering every
    landmark (so ``terminate_on_success`` ends those at the next step)."""
    rng = np.random.default_rng(seed)
    n = env.num_envs
    pos = rng.uniform(-1, 1, (n, AGENTS, 2))
    landmarks = np.array([[-0.8, 0.0], [0.0, 0.8], [0.8, 0.0]])[None].repeat(n, 0)
    pos[::3] = landmarks[::3]  # every third env already covers its landmarks
    env.set_state(pos, np.zeros_like(pos), landmarks, elapsed_steps=np.arange(n) * 4 % 25)
    return env


@pytest.mark.parametrize("terminate_on_success", [False, True])
def test_index_and_mask_resets_give_the_same_bits(terminate_on_success, monkeypatch):
    """Envs end at different steps (staggered clocks, early successes); the device path's
    masked reset must equal the host path's indexed one, value for value, and never ask
    the host which envs ended."""

    def host_read(*args):
        raise AssertionError("the device path read which envs ended back to the host")

    monkeypatch.setattr(simple_spread, "ended_envs", host_read)
    monkeypatch.setattr(simple_spread, "to_host", host_read)

    def new(xp):
        env = SimpleSpread(7, seed=11, xp=xp, resets="counter", terminate_on_success=terminate_on_success)
        env.reset()
        return staggered(env)

    host, device = trajectory(new(np), 60), trajectory(new(device_like_numpy()), 60)
    ends = [int((step[2] | step[3]).sum()) for step in host]
    assert 0 < max(ends) < 7  # steps where some, not all, envs ended
    if terminate_on_success:
        first = host[0]  # the covering envs end at once (terminated, or truncated at 25)
        assert (first[2] | first[3])[::3].all() and not first[2][1::3].any()
    for step_host, step_device in zip(host, device):
        for a, b in zip(step_host, step_device):
            np.testing.assert_array_equal(a, b)


def test_starts_are_the_generator_s_draws_for_each_env_and_episode():
    env = SimpleSpread(5, seed=4, resets="counter")
    env.reset()
    for i in range(5):
        pos, landmarks = expected_start(4, i, 0)
        np.testing.assert_array_equal(env.state["agent_pos"][i], pos)
        np.testing.assert_array_equal(env.state["landmark_pos"][i], landmarks)
        np.testing.assert_array_equal(env.state["agent_vel"][i], 0.0)
    for _ in range(25):  # the whole team's episode truncates: every env on to episode 1
        env.step(actions(5, 0))
    for i in range(5):
        np.testing.assert_array_equal(env.state["agent_pos"][i], expected_start(4, i, 1)[0])
    env.reset()  # no seed: each env's next episode
    np.testing.assert_array_equal(env.state["agent_pos"][2], expected_start(4, 2, 2)[0])
    env.reset(seed=4)  # the seed again: episode 0 again
    np.testing.assert_array_equal(env.state["agent_pos"][2], expected_start(4, 2, 0)[0])


def test_the_dynamics_and_episode_stats_are_mpe2_mode_s():
    """From the same state the two reset modes step identically until a reset, and report
    the same returns; counter mode's stats are EndedEpisodes (device-resident on a GPU)."""
    counter = staggered(SimpleSpread(6, seed=1, resets="counter"))
    mpe2 = staggered(SimpleSpread(6, seed=1))
    restarted = np.zeros(6, bool)  # envs whose episode ended once: their starts differ
    for t in range(25):
        a = actions(6, t)
        c_obs, c_rew, c_term, c_trunc, c_info = counter.step(a)
        m_obs, m_rew, m_term, m_trunc, m_info = mpe2.step(a)
        same = ~restarted
        np.testing.assert_array_equal(c_rew[same], m_rew[same])
        np.testing.assert_array_equal(c_info["final_obs"][same], m_info["final_obs"][same])
        np.testing.assert_array_equal(c_trunc, m_trunc)
        ended = c_term | c_trunc
        np.testing.assert_array_equal(c_obs[same & ~ended], m_obs[same & ~ended])
        assert isinstance(c_info["episode_return"], EndedEpisodes)
        np.testing.assert_array_equal(np.asarray(c_info["episode_length"]), m_info["episode_length"])
        if not restarted[ended].any():  # returns of episodes that ran the same steps
            np.testing.assert_array_equal(np.asarray(c_info["episode_return"]), m_info["episode_return"])
        restarted |= ended
    assert restarted.all()  # every env's first episode was compared to its end


def test_a_checkpoint_carries_the_reset_mode_and_the_counters():
    env = SimpleSpread(4, seed=2, resets="counter")
    env.reset()
    for t in range(30):
        env.step(actions(4, t))
    fresh = SimpleSpread(4, seed=9)  # mpe2 mode, another seed
    fresh.reset()
    fresh.load_state_dict(env.state_dict())
    assert fresh._resets == "counter" and fresh._episodes.tolist() == [1, 1, 1, 1]
    for a, b in zip(trajectory(env, 40), trajectory(fresh, 40)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_an_unknown_reset_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"resets must be one of \('mpe2', 'counter'\), got 'gpu'"):
        SimpleSpread(2, resets="gpu")


def test_make_on_a_gpu_gives_device_resets(monkeypatch):
    import workbench.envs as envs

    assert make("simple_spread_v3", 4, seed=0)._resets == "mpe2"  # the host keeps mpe2's starts
    monkeypatch.setattr(envs, "_array_module", lambda backend: device_like_numpy())
    assert make("simple_spread_v3", 4, seed=0, device="cuda:0")._resets == "counter"


def test_uniforms_are_in_range_and_independent_of_the_batch():
    key = counter_rng.seed_key(123)
    envs, episodes = np.arange(1000), np.arange(1000, dtype=np.uint32) % 3
    u = counter_rng.uniforms(key, envs, episodes, 8)
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    picked = counter_rng.uniforms(key, envs[[7, 500]], episodes[[7, 500]], 8)
    np.testing.assert_array_equal(picked, u[[7, 500]])
    assert len(np.unique(u)) == u.size
