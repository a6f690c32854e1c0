"""The array SimpleSpread against mpe2's simple_spread_v3.parallel_env, step for step."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from workbench.envs import VectorEnv, make
from workbench.envs.simple_spread import SimpleSpread

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")

ATOL = 1e-5  # float32 observations/rewards; in practice they agree bit for bit


def mpe_env(agents: int = 3, **kwargs) -> object:
    return simple_spread_v3.parallel_env(N=agents, **kwargs)


def mpe_obs(penv, obs: dict | None = None) -> np.ndarray:
    """[agents, obs_dim]: from a reset/step dict, or observed now (after a state overwrite)."""
    if obs is None:
        return np.stack([penv.unwrapped.observe(a) for a in penv.possible_agents])
    return np.stack([obs[a] for a in penv.possible_agents])


def mpe_state(penv) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    world = penv.unwrapped.world
    return (
        np.stack([a.state.p_pos for a in world.agents]),
        np.stack([a.state.p_vel for a in world.agents]),
        np.stack([lm.state.p_pos for lm in world.landmarks]),
    )


def set_mpe_state(penv, pos: np.ndarray, vel: np.ndarray, landmarks: np.ndarray) -> None:
    world = penv.unwrapped.world
    for agent, p, v in zip(world.agents, pos, vel):
        agent.state.p_pos, agent.state.p_vel = p.copy(), v.copy()
    for landmark, p in zip(world.landmarks, landmarks):
        landmark.state.p_pos = p.copy()


def random_actions(rng: np.random.Generator, env: SimpleSpread) -> np.ndarray:
    shape = (env.num_envs, env.num_agents)
    if env.continuous_actions:
        # Mostly in [0, 1]; a few outside, which both sides clip.
        return rng.uniform(-0.1, 1.1, size=(*shape, 5)).astype(np.float32)
    return rng.integers(0, 5, size=shape)


def mpe_step(penv, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    agent_ids = penv.possible_agents
    # Discrete: one int per agent; continuous: one [5] float32 row per agent.
    step_actions = {a: actions[i] if actions.ndim > 1 else int(actions[i]) for i, a in enumerate(agent_ids)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mpe2's "action out of bounds, clipping" warning
        obs, reward, term, trunc, _ = penv.step(step_actions)
    assert len(set(term.values())) == 1 and len(set(trunc.values())) == 1  # all agents together
    return (
        mpe_obs(penv, obs),
        np.array([reward[a] for a in agent_ids]),
        term[agent_ids[0]],
        trunc[agent_ids[0]],
    )


CONFIGS = [
    pytest.param({}, id="defaults"),
    pytest.param({"agents": 4, "local_ratio": 0.2, "max_cycles": 10}, id="4agents-ratio0.2"),
    pytest.param({"continuous_actions": True}, id="continuous"),
    pytest.param({"agents": 1, "max_cycles": 7}, id="1agent"),
]


@pytest.mark.parametrize("seed", [0, 7, 123])
@pytest.mark.parametrize("config", CONFIGS)
def test_single_env_equals_mpe2_with_same_seed_including_resets(config, seed):
    # With one env our generator is mpe2's (default_rng(seed), same draw order):
    # no state copying, and autoreset starts equal mpe2's unseeded reset().
    agents = config.get("agents", 3)
    kwargs = {k: v for k, v in config.items() if k != "agents"}
    penv = mpe_env(agents, **kwargs)
    g_obs, _ = penv.reset(seed=seed)
    env = SimpleSpread(1, agents=agents, seed=seed, **kwargs)
    obs = env.reset()
    np.testing.assert_array_equal(obs[0], mpe_obs(penv, g_obs))
    max_cycles = env.max_cycles
    rng = np.random.default_rng(seed)
    endings = 0
    for t in range(3 * max_cycles):
        actions = random_actions(rng, env)
        obs, reward, terminated, truncated, info = env.step(actions)
        g_obs, g_reward, g_term, g_trunc = mpe_step(penv, actions[0])
        assert (terminated[0], truncated[0]) == (g_term, g_trunc)
        assert truncated[0] == ((t + 1) % max_cycles == 0)
        np.testing.assert_allclose(reward[0], g_reward, rtol=0, atol=ATOL)
        if g_term or g_trunc:
            endings += 1
            np.testing.assert_allclose(info["final_obs"][0], g_obs, rtol=0, atol=ATOL)
            g_obs, _ = penv.reset()
            g_obs = mpe_obs(penv, g_obs)
        np.testing.assert_allclose(obs[0], g_obs, rtol=0, atol=ATOL)
    assert endings == 3


def test_bit_identical_to_mpe2():
    # The docstring's claim: same expressions in the same order, so not just close.
    penv = mpe_env()
    g_obs, _ = penv.reset(seed=1)
    env = SimpleSpread(1, seed=1)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(24):  # one episode short of truncation: obs is never a reset
        actions = random_actions(rng, env)
        obs, reward, *_ = env.step(actions)
        g_obs, g_reward, *_ = mpe_step(penv, actions[0])
        np.testing.assert_array_equal(obs[0], g_obs)
        np.testing.assert_array_equal(reward[0], g_reward.astype(np.float32))
    pos, vel, landmarks = mpe_state(penv)
    np.testing.assert_array_equal(env.state["agent_pos"][0], pos)
    np.testing.assert_array_equal(env.state["agent_vel"][0], vel)
    np.testing.assert_array_equal(env.state["landmark_pos"][0], landmarks)


@pytest.mark.parametrize("continuous", [False, True])
def test_batched_envs_each_match_their_own_mpe2_env(continuous):
    num_envs, agents, max_cycles = 8, 3, 25
    penvs = [mpe_env(agents, continuous_actions=continuous) for _ in range(num_envs)]
    for i, penv in enumerate(penvs):
        penv.reset(seed=100 + i)
    env = SimpleSpread(num_envs, agents=agents, continuous_actions=continuous, seed=5)
    env.reset()
    # Staggered episode clocks, so envs end (and autoreset) at different steps.
    offsets = np.arange(num_envs) * 3
    for penv, offset in zip(penvs, offsets):
        penv.unwrapped.steps = int(offset)
    states = [mpe_state(penv) for penv in penvs]
    obs = env.set_state(*(np.stack(s) for s in zip(*states)), elapsed_steps=offsets)
    np.testing.assert_array_equal(obs, np.stack([mpe_obs(p) for p in penvs]))

    rng = np.random.default_rng(0)
    ended = np.zeros(num_envs, np.int64)
    returns = np.zeros(num_envs)
    collisions = 0
    for _ in range(2 * max_cycles + 5):
        actions = random_actions(rng, env)
        obs, reward, terminated, truncated, info = env.step(actions)
        assert obs.shape == (num_envs, agents, 18) and reward.shape == (num_envs, agents)
        collisions += int((reward.min(axis=1) != reward.max(axis=1)).sum())
        expected_returns = []
        for i, penv in enumerate(penvs):
            g_obs, g_reward, g_term, g_trunc = mpe_step(penv, actions[i])
            assert (terminated[i], truncated[i]) == (g_term, g_trunc)
            np.testing.assert_allclose(reward[i], g_reward, rtol=0, atol=ATOL)
            returns[i] += g_reward.mean()
            if g_term or g_trunc:
                ended[i] += 1
                expected_returns.append(returns[i])
                returns[i] = 0.0
                np.testing.assert_allclose(info["final_obs"][i], g_obs, rtol=0, atol=ATOL)
                # Our env drew its own fresh start; make mpe2's env start there too.
                penv.reset()
                state = env.state
                set_mpe_state(
                    penv,
                    state["agent_pos"][i],
                    state["agent_vel"][i],
                    state["landmark_pos"][i],
                )
                g_obs = mpe_obs(penv)
                assert np.all(state["agent_vel"][i] == 0) and env.elapsed_steps[i] == 0
            np.testing.assert_allclose(obs[i], g_obs, rtol=0, atol=ATOL)
        # Team return: sum over the episode of the mean over agents of the reward.
        np.testing.assert_allclose(info["episode_return"], expected_returns, rtol=1e-6)
    assert ended.min() >= 2  # every env autoreset at least twice, at different steps
    assert collisions > 0  # the contact force and collision penalty were exercised


def test_terminate_on_success_matches_mpe2_and_truncation_wins():
    # Every agent sits on a landmark, far from the others: the first no-op step covers all.
    landmarks = np.array([[-0.8, 0.0], [0.0, 0.8], [0.8, 0.0]])
    pos = landmarks + 0.01
    vel = np.zeros((3, 2))
    for elapsed, expect in ((0, (True, False)), (24, (False, True))):
        penv = mpe_env(terminate_on_success=True)
        penv.reset(seed=0)
        penv.unwrapped.steps = elapsed
        set_mpe_state(penv, pos, vel, landmarks)
        env = SimpleSpread(1, terminate_on_success=True, seed=0)
        env.reset()
        env.set_state(pos[None], vel[None], landmarks[None], elapsed_steps=[elapsed])
        _, reward, terminated, truncated, info = env.step(np.zeros((1, 3), np.int64))
        _, g_reward, g_term, g_trunc = mpe_step(penv, np.zeros(3, np.int64))
        assert (terminated[0], truncated[0]) == (g_term, g_trunc) == expect
        np.testing.assert_allclose(reward[0], g_reward, rtol=0, atol=ATOL)
        assert info["episode_length"].tolist() == [elapsed + 1]
    # Without the option, the same covered state never terminates.
    env = SimpleSpread(1, seed=0)
    env.reset()
    env.set_state(pos[None], vel[None], landmarks[None])
    assert not env.step(np.zeros((1, 3), np.int64))[2][0]


def test_collision_penalty_and_contact_push():
    # Agents 0 and 1 overlap (0.2 apart < 0.3); agent 2 is far away.
    pos = np.array([[[0.0, 0.0], [0.2, 0.0], [0.9, 0.9]]])
    landmarks = np.array([[[0.0, 0.0], [0.2, 0.0], [0.9, 0.9]]])
    env = SimpleSpread(1, local_ratio=1.0, seed=0)  # local term only
    env.reset()
    env.set_state(pos, np.zeros_like(pos), landmarks)
    _, reward, *_ = env.step(np.zeros((1, 3), np.int64))
    assert reward[0].tolist() == [-1.0, -1.0, 0.0]
    vel = env.state["agent_vel"][0]
    assert vel[0, 0] < 0 < vel[1, 0]  # pushed apart along x
    assert vel[2].tolist() == [0.0, 0.0]  # exp(-(dist - 0.3) / 1e-3) underflows to 0


def test_seeding_is_reproducible():
    def rollout(seed: int) -> np.ndarray:
        env = SimpleSpread(16, seed=seed)
        rng = np.random.default_rng(0)
        out = [env.reset()]
        for _ in range(60):  # crosses two autoresets
            out.append(env.step(rng.integers(0, 5, size=(16, 3)))[0])
        return np.stack(out)

    np.testing.assert_array_equal(rollout(5), rollout(5))
    assert not np.array_equal(rollout(5), rollout(6))
    env = SimpleSpread(8, seed=0)
    np.testing.assert_array_equal(env.reset(seed=9), SimpleSpread(8, seed=9).reset())


def test_reset_distribution():
    env = SimpleSpread(4096, seed=3)
    obs = env.reset()
    assert obs.shape == (4096, 3, 18) and obs.dtype == np.float32
    state = env.state
    for name in ("agent_pos", "landmark_pos"):
        values = state[name]
        assert np.all(values >= -1) and np.all(values <= 1)
        assert values.min() < -0.999 and values.max() > 0.999 and abs(values.mean()) < 0.02
    assert np.all(state["agent_vel"] == 0)
    np.testing.assert_array_equal(obs[..., 14:], 0.0)  # comm of the 2 others: silent
    assert np.all(obs[..., 10:14] != 0)  # other agents, relative


def test_protocol_shapes_and_make():
    env = make("simple_spread_v3", 4, seed=0)
    assert isinstance(env, SimpleSpread) and isinstance(env, VectorEnv)
    assert env.num_envs == 4 and env.observation_shape == (3, 18) and env.xp is np
    assert env.agent_ids == ["agent_0", "agent_1", "agent_2"]
    assert env.action_space.shape == (3,) and env.action_space.nvec.tolist() == [5, 5, 5]
    obs = env.reset()
    assert obs.shape == (4, 3, 18) and obs.flags.c_contiguous
    obs, reward, terminated, truncated, info = env.step(np.zeros(12, np.int64))  # flat ok
    assert reward.shape == (4, 3) and reward.dtype == np.float32
    assert terminated.shape == truncated.shape == (4,) and terminated.dtype == bool
    assert info["final_obs"].shape == (4, 3, 18)
    assert info["episode_return"].shape == info["episode_length"].shape == (0,)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((4, 2), np.int64))
    with pytest.raises(RuntimeError, match="reset"):
        SimpleSpread(2).step(np.zeros((2, 3), np.int64))

    cont = SimpleSpread(2, agents=5, continuous_actions=True, seed=0)
    assert cont.observation_shape == (5, 30) and cont.action_space.shape == (5, 5)
    assert cont.reset().shape == (2, 5, 30)
    assert cont.step(np.full((2, 5, 5), 0.5, np.float32))[1].shape == (2, 5)
    with pytest.raises(ValueError, match="shape"):
        cont.step(np.zeros((2, 5), np.float32))
