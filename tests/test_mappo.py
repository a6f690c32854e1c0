"""MAPPO: the notebook is the library algorithm, the networks have the multi-agent shapes (shared
actor over own observations, centralised critic over the global state), the update runs and
syncs through ``wb.allreduce``, and it learns simple_spread_v3 under the inline policy (and runs
unchanged under coarse)."""

from __future__ import annotations

import pytest

import dataclasses
from pathlib import Path

import numpy as np
import torch

import workbench as wb
from workbench.algorithms import mappo
from workbench.algorithms.mappo import MAPPOAgent, MAPPOConfig, build_fdg, global_state, mappo_update
from tests.conftest import assert_notebook_is_the_module

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "mappo.ipynb"


def _namespace(**overrides) -> dict:
    """The module's names with a modified ``cfg``."""
    return {**vars(mappo), "cfg": dataclasses.replace(MAPPOConfig(), **overrides)}


def test_notebook_cells_are_the_library_algorithm_byte_for_byte():
    notebook_fdg, options = assert_notebook_is_the_module(NOTEBOOK, mappo)
    cfg = notebook_fdg.namespace["cfg"]
    assert options["iterations"] == cfg.iterations and options["steps"] == cfg.num_steps


def test_the_dataflow_is_ppo_shaped():
    fdg = build_fdg()
    assert sorted(fdg.fragments) == ["actor", "env", "learner"]
    edges = {(e.name, e.producer, e.consumer) for e in fdg.interfaces}
    for name in ("obs", "done"):
        assert (name, "env", "actor") in edges
    for name in ("state", "starts", "action", "logp", "value"):
        assert (name, "actor", "learner") in edges
    assert ("reward", "env", "learner") in edges and ("action", "actor", "env") in edges
    assert ("weights", "learner", "actor") in edges


def test_config_matches_the_env():
    cfg = MAPPOConfig()
    envs = wb.envs.make(cfg.env_id, num_envs=2, seed=0)
    assert envs.observation_shape == (cfg.num_agents, cfg.obs_dim)
    assert cfg.num_envs % 2 == 0  # two env replicas can split it


def test_the_env_cell_s_device_gives_the_env_backend_gave():
    """The env init cell passes ``device=replica.device`` (was ``backend=replica.device``): on the
    CPU the same NumPy env, the same episodes (on a GPU both give the CuPy env on that GPU)."""
    by_device = wb.envs.make("simple_spread_v3", num_envs=4, seed=3, device="cpu")
    by_backend = wb.envs.make("simple_spread_v3", num_envs=4, seed=3, backend="cpu")
    assert type(by_device) is type(by_backend) and by_device.xp is np is by_backend.xp
    np.testing.assert_array_equal(by_device.reset(), by_backend.reset())
    actions = np.random.default_rng(0).integers(0, 5, size=(30, 4, 3))
    for a in actions:
        for mine, theirs in zip(by_device.step(a)[:4], by_backend.step(a)[:4]):
            np.testing.assert_array_equal(mine, theirs)


def test_global_state_is_all_observations_plus_agent_id():
    obs = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # [N, agents, obs_dim]
    g = global_state(obs)
    assert g.shape == (2, 3, 3 * 4 + 3)
    for n in range(2):
        for i in range(3):
            assert torch.equal(g[n, i, :12], obs[n].reshape(-1))  # same joint obs for all
            assert torch.equal(g[n, i, 12:], torch.eye(3)[i])  # then who is asking


def test_network_output_shapes():
    torch.manual_seed(0)
    cfg = MAPPOConfig()
    agent = MAPPOAgent(cfg.obs_dim, cfg.n_actions, cfg.num_agents, cfg.hidden)
    obs = np.random.default_rng(0).normal(size=(7, 3, cfg.obs_dim)).astype(np.float32)
    action, logp, value = agent.act(obs)
    assert all(isinstance(x, np.ndarray) for x in (action, logp, value))  # NumPy in, NumPy out
    assert action.shape == logp.shape == value.shape == (7, 3)
    assert action.dtype == np.int64 and ((0 <= action) & (action < 5)).all()
    assert (logp <= 0).all() and np.isfinite(value).all()
    # batch dims in front: [T, N, agents, obs_dim] → [T, N, agents]
    x = torch.from_numpy(obs).expand(4, 7, 3, cfg.obs_dim)
    new_logp, entropy, v = agent.evaluate(x, torch.from_numpy(action).expand(4, 7, 3))
    assert new_logp.shape == entropy.shape == v.shape == (4, 7, 3)
    np.testing.assert_allclose(new_logp[0].detach().numpy(), logp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v[0].detach().numpy(), value, rtol=1e-5, atol=1e-6)
    assert agent.actor[0].in_features == cfg.obs_dim  # own observation
    assert agent.critic[0].in_features == cfg.num_agents * (cfg.obs_dim + 1)  # global state + id


def test_actor_is_shared_and_critic_is_centralised():
    torch.manual_seed(0)
    agent = MAPPOAgent(18, 5, 3)
    obs = torch.randn(5, 3, 18)
    perturbed = obs.clone()
    perturbed[:, 2] += 1.0  # change agent 2's observation only
    logits, logits2 = agent.actor(obs), agent.actor(perturbed)
    assert torch.equal(logits[:, :2], logits2[:, :2])  # agents 0, 1 act on their own obs
    assert not torch.equal(logits[:, 2], logits2[:, 2])
    v, v2 = agent.value(obs), agent.value(perturbed)
    assert not torch.allclose(v[:, 0], v2[:, 0])  # the critic sees every agent
    # the same agent's observation in another agent's slot is scored by the same actor
    swapped = obs[:, [1, 0, 2]]
    assert torch.allclose(agent.actor(swapped)[:, 0], logits[:, 1])


def test_update_changes_both_networks_and_calls_allreduce(monkeypatch):
    torch.manual_seed(0)
    cfg = MAPPOConfig(update_epochs=2)
    agent = MAPPOAgent(cfg.obs_dim, cfg.n_actions, cfg.num_agents, cfg.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    T, N, A = 6, 4, 3
    state = rng.normal(size=(T, N, A, cfg.obs_dim)).astype(np.float32)
    action, logp, value = (np.stack(x) for x in zip(*(agent.act(s) for s in state)))
    reward = rng.normal(size=(T, N, A)).astype(np.float32)
    starts = np.zeros((T, N), dtype=bool)
    starts[3, 1] = True
    calls = []
    real = wb.allreduce
    monkeypatch.setattr(mappo.wb, "allreduce", lambda x: calls.append(x.shape) or real(x))
    before = [p.detach().clone() for p in agent.parameters()]
    losses = mappo_update(
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
        last_obs=state[-1],
        last_done=np.zeros(N, bool),
    )
    assert set(losses) == {"losses/policy_loss", "losses/value_loss", "losses/entropy"}
    assert all(np.isfinite(v) for v in losses.values())
    n_params = sum(p.numel() for p in agent.parameters())
    assert calls == [(n_params,)] * 2  # once per gradient step, one flat vector
    changed = [not torch.equal(a, b) for a, b in zip(before, agent.parameters())]
    assert all(changed)


def test_a_short_inline_run_logs_losses():
    cfg = MAPPOConfig()
    run = build_fdg().run(iterations=3, steps=25, progress=False)
    assert run.completed_iterations == 3 and run.env_steps == 3 * 25 * cfg.num_envs
    metrics = run.metrics
    for name in ("losses/policy_loss", "losses/value_loss", "losses/entropy"):
        assert name in metrics and metrics[name].notna().all(), name
    assert (metrics["losses/entropy"] > 0).all()
    assert len(run.episode_returns) == 3 * cfg.num_envs  # 25-step episodes, all envs


def test_runs_on_the_env_a_gpu_gets_its_device_resets_and_deferred_stats():
    """On a GPU the env cell's make() gives SimpleSpread with counter resets, whose episode
    stats are EndedEpisodes read once an iteration: its NumPy twin here, through the cells."""
    import types

    from workbench.envs.episodes import EndedEpisodes
    from workbench.envs.simple_spread import SimpleSpread

    made = []

    def make(env_id, num_envs, seed, device):
        made.append(SimpleSpread(num_envs, seed=seed, resets="counter"))
        return made[-1]

    class WithDeviceEnv(types.ModuleType):
        envs = types.SimpleNamespace(make=make)

        def __getattr__(self, name):
            return getattr(wb, name)

    cfg = MAPPOConfig(num_envs=8)
    run = build_fdg({**_namespace(num_envs=8), "wb": WithDeviceEnv("wb")}).run(iterations=2, steps=25, progress=False)
    assert made and made[0]._resets == "counter"
    assert isinstance(made[0].step(np.zeros((8, 3), np.int64))[4]["episode_return"], EndedEpisodes)
    assert len(run.episode_returns) == 2 * cfg.num_envs and np.isfinite(run.episode_returns).all()
    assert run.metrics["losses/value_loss"].notna().all()


def test_runs_unchanged_under_coarse(client):
    cfg = MAPPOConfig(num_envs=8)
    run = build_fdg(_namespace(num_envs=8)).run(iterations=2, steps=25, policy="coarse", cluster=client, progress=False)
    assert run.status == "finished" and run.policy_name == "SingleLearnerCoarse"
    assert run.env_steps == 2 * 25 * cfg.num_envs
    assert len(run.episode_returns) == 2 * cfg.num_envs  # both replicas' episodes
    assert run.metrics["losses/value_loss"].notna().all()


def _random_mean_return(num_envs: int, seed: int, episodes_per_env: int = 20) -> float:
    envs = wb.envs.make("simple_spread_v3", num_envs=num_envs, seed=seed)
    envs.reset()
    rng = np.random.default_rng(seed)
    returns: list[float] = []
    while len(returns) < num_envs * episodes_per_env:
        *_, info = envs.step(rng.integers(0, 5, size=(num_envs, 3)))
        returns.extend(info["episode_return"].tolist())
    return float(np.mean(returns))


MARGIN = 3.0  # measured gaps at this budget: 6.0-8.1 (last iteration), 5.8-8.4 (last 20)


@pytest.mark.slow  # a full training to a learning target
def test_inline_mappo_learns_simple_spread():
    """100 iterations (320k env steps, ~15 s here) of the default config, seed 1. A
    uniform-random team scores about -26.3; the trained policy's episodes in the last
    iteration average -19.2, -18.7, -20.6 (seeds 1, 2, 3: 6.0 to 8.1 above random)."""
    cfg = MAPPOConfig(iterations=100)
    run = build_fdg(_namespace(iterations=100)).run(iterations=cfg.iterations, steps=cfg.num_steps, progress=False)
    random_mean = _random_mean_return(cfg.num_envs, cfg.seed)
    trained = float(np.mean(run.episode_returns[-cfg.num_envs :]))
    assert trained > random_mean + MARGIN, (trained, random_mean, run.summary())
    assert run.mean_return() > random_mean + MARGIN
