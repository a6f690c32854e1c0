"""MAPPO (multi-agent PPO with a centralised critic) on MPE simple_spread, as workbench fragments.

The algorithm is Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games": PPO's clipped surrogate and GAE, with

- one **shared-parameter actor**: the same policy network maps every agent's OWN observation
  (``[obs_dim]``) to a categorical over the 5 moves — decentralised execution;
- a **centralised critic**: the value is computed from the global state, the concatenation of
  all agents' observations (``agents × obs_dim`` floats), plus a one-hot id of the agent whose
  value it is, so it gives **one value per agent** (simple_spread's rewards differ per agent by
  the collision term). Centralised training: the critic is only used by the update and by the
  actor to record ``value``, never to choose actions.

Rewards arrive per agent, ``[T, N, agents]``; GAE and the advantages treat every (env, agent)
pair as its own stream by flattening agents into the batch axis, ``[T, N × agents]`` (an agent's
episode starts and ends with its env's, so ``starts``/``done`` are repeated over agents).

Read it top to bottom like ``ppo.py``: the hyperparameters, the networks, the update, then the
fragment cells. ``notebooks/mappo.ipynb`` holds the same cells, byte for byte, and builds the
same FDG (a test checks it).

Example:
    >>> from workbench.algorithms import mappo
    >>> fdg = mappo.build_fdg()                    # namespace: this module
    >>> sorted(fdg.fragments)
    ['actor', 'env', 'learner']
    >>> run = fdg.run(iterations=3, steps=25, progress=False)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import workbench as wb
from workbench.algorithms.batch_rule import minibatch_slices
from workbench.algorithms.config_docs import documented
from workbench.algorithms.optim import adam
from workbench.algorithms.ppo import device_of, flat_batch, like, on_device
from workbench.kernels import array_module_of, gae, normalize_advantages

__all__ = [
    "adam",
    "MAPPOConfig",
    "MAPPOAgent",
    "global_state",
    "mappo_update",
    "to_numpy",
    "FRAGMENT_CELLS",
    "build_fdg",
    "cfg",
]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class MAPPOConfig:
    """Every MAPPO hyperparameter, in one place.

    The defaults are tuned for what a 2-core CPU learns in about a minute (see
    ``benchmarks/bench_mappo.py``): 64 envs × 3 agents, 50 steps (two 25-step episodes) per
    iteration, a few full-batch epochs (the MAPPO paper's 5–15 epochs on large batches; here
    one Adam step at batch 9600 costs little more than at 2400)."""

    env_id: str = "simple_spread_v3"
    """the environment (the NumPy/CuPy array copy of mpe2's simple_spread_v3)"""
    num_agents: int = 3
    """agents (and landmarks) per env: mpe2's default, which ``wb.envs.make`` builds"""
    obs_dim: int = 18
    """one agent's observation: ``6 × num_agents`` floats in simple_spread"""
    n_actions: int = 5
    """discrete moves: no-op, -x, +x, -y, +y"""
    seed: int = 1
    """seeds torch and the envs (env replica ``i`` uses ``seed + i``)"""
    num_envs: int = 64
    """environments in total, split across the env replicas (keep it even: 2 replicas must
    split it)"""
    num_steps: int = 50
    """steps per iteration (``T``): each iteration learns from ``num_envs × num_steps ×
    num_agents`` agent-steps. A multiple of the 25-step episode keeps the episodes aligned
    with the rollouts (not required: GAE bootstraps across the cut)"""
    iterations: int = 200
    """iterations a run takes (there is no "solved" threshold for simple_spread)"""
    learning_rate: float = 2e-3
    """Adam step size (actor and critic), annealed linearly to 0 over ``iterations`` when
    ``anneal_lr``"""
    anneal_lr: bool = True
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    num_minibatches: int = 1
    """minibatches per epoch"""
    update_epochs: int = 5
    """passes over each iteration's batch"""
    clip_coef: float = 0.2
    """surrogate clipping"""
    clip_vloss: bool = True
    """also clip the value's change per update to ``clip_coef`` (MAPPO's and CleanRL's
    ``clip_vloss``); measured a little better here than without, on raw returns of about -20"""
    ent_coef: float = 0.01
    """entropy bonus (the MAPPO paper's 0.01)"""
    vf_coef: float = 1.0
    """value-loss weight (the critic is a separate network: this only scales its gradient)"""
    max_grad_norm: float = 10.0
    """global-norm clipping, applied to the actor's and the critic's gradients separately
    (MAPPO's 10.0)"""
    hidden: int = 64
    """width of both hidden layers of both networks"""


cfg = MAPPOConfig()


# ----------------------------------------------------------------------------- the networks
def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


def to_numpy(x) -> np.ndarray:
    """A NumPy array from a NumPy or CuPy array (a device-to-host copy for CuPy), for
    reading a GPU env's values on the host (the networks and the update take either kind).

    >>> to_numpy([1.0, 2.0]).tolist()
    [1.0, 2.0]
    """
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def global_state(obs: torch.Tensor) -> torch.Tensor:
    """The centralised critic's input for every agent: ``[..., agents, obs_dim]`` →
    ``[..., agents, agents × obs_dim + agents]``, the concatenation of all agents'
    observations (the same for every agent) followed by a one-hot of the agent's index."""
    *lead, agents, obs_dim = obs.shape
    joint = obs.reshape(*lead, 1, agents * obs_dim).expand(*lead, agents, agents * obs_dim)
    ids = torch.eye(agents, dtype=obs.dtype, device=obs.device).expand(*lead, agents, agents)
    return torch.cat([joint, ids], dim=-1)


class MAPPOAgent(nn.Module):
    """A shared-parameter actor over each agent's own observation and a centralised critic
    over the global state (tanh MLPs, as CleanRL's PPO).

    Shapes: observations ``[..., agents, obs_dim]``; logits ``[..., agents, n_actions]``;
    values ``[..., agents]`` (one per agent)."""

    def __init__(self, obs_dim: int, n_actions: int, num_agents: int, hidden: int = 64) -> None:
        super().__init__()
        self.actor = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(), _layer(hidden, n_actions, std=0.01)
        )
        self.critic = nn.Sequential(
            _layer(num_agents * obs_dim + num_agents, hidden),
            nn.Tanh(),
            _layer(hidden, hidden),
            nn.Tanh(),
            _layer(hidden, 1, std=1.0),
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``[..., agents, obs_dim]`` → ``[..., agents]``, from the global state."""
        return self.critic(global_state(obs)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """log-prob of ``action`` ``[..., agents]``, entropy and value at ``obs`` (with
        gradients), each ``[..., agents]``; Categorical's numbers from one ``log_softmax``."""
        logp_all = torch.log_softmax(self.actor(obs), -1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, action[..., None]).squeeze(-1), entropy, self.value(obs)

    @torch.inference_mode()
    def act(self, obs):
        """Sample every agent's move for a batch ``[N, agents, obs_dim]``: (action, log-prob,
        value), each ``[N, agents]``, in the observations' kind of array (as ``ppo.py``'s):
        NumPy in, NumPy out; CuPy observations from a GPU env reach a network on that GPU
        through DLPack and the results go back as CuPy, so nothing crosses to the host.
        While evaluated (``wb.evaluating()``: ``run.evaluate``) each agent takes its most likely move."""
        x = on_device(obs if type(obs).__module__.startswith("cupy") else to_numpy(obs), device_of(self))
        logp_all = torch.log_softmax(self.actor(x), -1)
        flat = logp_all.reshape(-1, logp_all.shape[-1])
        action = flat.argmax(-1, keepdim=True) if wb.evaluating() else torch.multinomial(flat.exp(), 1)
        action = action.reshape(logp_all.shape[:-1])
        logp = logp_all.gather(-1, action[..., None]).squeeze(-1)
        return like(obs, action), like(obs, logp), like(obs, self.value(x))


# ----------------------------------------------------------------------------- the update
def _sync_and_clip(groups: list[list[torch.Tensor]], max_grad_norm: float | None) -> None:
    """The gradient sync point, then global-norm clipping per parameter group.

    ``wb.allreduce`` is called once on the concatenated gradients of all groups (identity with
    a single learner, an average across learners otherwise), as ``ppo.py``; each group (the
    actor, the critic) is then clipped to ``max_grad_norm`` on its own, as MAPPO's separate
    actor and critic optimisers do, so a large value gradient cannot shrink the policy's."""
    grads = [[p.grad for p in group] for group in groups]
    flat_all = [g for group in grads for g in group]
    flat = wb.allreduce(torch.cat([g.reshape(-1) for g in flat_all]))
    parts = list(flat.split([sum(g.numel() for g in group) for group in grads]))
    if max_grad_norm:
        parts = [p * (max_grad_norm / (p.norm() + 1e-6)).clamp(max=1.0) for p in parts]
    flat = torch.cat(parts)
    torch._foreach_copy_(flat_all, [c.view_as(g) for c, g in zip(flat.split([g.numel() for g in flat_all]), flat_all)])


def mappo_update(
    agent, optimizer, cfg, update, state, action, logp, value, reward, starts, last_obs, last_done
) -> dict[str, float]:
    """One MAPPO update from a rollout; returns CleanRL-named losses.

    Shapes: ``state`` ``[T, N, agents, obs_dim]``; ``action``, ``logp``, ``value``,
    ``reward`` ``[T, N, agents]``; ``starts`` ``[T, N]`` (1 where ``state[t]`` begins an
    episode); ``last_obs`` ``[N, agents, obs_dim]`` and ``last_done`` ``[N]``, the observation
    and done flag after the final step (they bootstrap the returns). NumPy or CuPy arrays
    (all of one kind): GAE runs where the rollout is, and the batch goes to ``agent``'s
    device once (no copy where it is there already: a GPU env's rollout on its GPU).
    """
    xp = array_module_of(reward)
    if cfg.anneal_lr:
        frac = max(0.0, 1.0 - update / cfg.iterations)
        optimizer.param_groups[0]["lr"] = frac * cfg.learning_rate
    T, N, A = reward.shape
    device = device_of(agent)  # the batch goes where the network is (replica.device)
    with torch.no_grad():  # in the rollout's kind of array: GAE runs where the rollout is
        last_value = like(reward, agent.value(on_device(xp.asarray(last_obs), device)))
    # Every (env, agent) pair is one GAE stream: agents flattened into the batch axis.
    advantages, returns = gae(
        reward.reshape(T, N * A),
        value.reshape(T, N * A),
        xp.repeat(starts, A, axis=1),
        last_value.reshape(N * A),
        xp.repeat(last_done, A),
        cfg.gamma,
        cfg.gae_lambda,
    )

    # The batch is of (step, env) pairs, each carrying all agents: the critic needs them all.
    b_obs, b_act = flat_batch(state, device), flat_batch(action, device, np.int64)
    b_logp, b_val = flat_batch(logp, device), flat_batch(value, device, np.float32)
    b_adv = flat_batch(advantages.reshape(T, N, A), device, np.float32)
    b_ret = flat_batch(returns.reshape(T, N, A), device, np.float32)
    batch = b_obs.shape[0]
    groups = [list(agent.actor.parameters()), list(agent.critic.parameters())]
    slices = minibatch_slices(batch, cfg.num_minibatches)
    for _ in range(cfg.update_epochs):
        order = torch.randperm(batch).to(device)  # the CPU generator's draw on every device
        for part in slices:
            mb = order[part]
            new_logp, entropy, new_value = agent.evaluate(b_obs[mb], b_act[mb])
            ratio = (new_logp - b_logp[mb]).exp()
            adv = normalize_advantages(b_adv[mb])
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            v_loss = (new_value - b_ret[mb]) ** 2
            if cfg.clip_vloss:
                v_clipped = b_val[mb] + (new_value - b_val[mb]).clamp(-cfg.clip_coef, cfg.clip_coef)
                v_loss = torch.max(v_loss, (v_clipped - b_ret[mb]) ** 2)
            v_loss = 0.5 * v_loss.mean()
            loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            _sync_and_clip(groups, cfg.max_grad_norm)
            optimizer.step()
    return {
        "losses/policy_loss": pg_loss.item(),
        "losses/value_loss": v_loss.item(),
        "losses/entropy": entropy.mean().item(),
    }


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body). The notebook holds them verbatim.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment env --init",
        """\
envs = wb.envs.make(cfg.env_id, num_envs=cfg.num_envs // replica.count, seed=cfg.seed + replica.index,
                    device=replica.device)  # "cpu": the NumPy env; "cuda:K": the CuPy env on GPU K
obs = envs.reset()
done = envs.xp.zeros(envs.num_envs, dtype=bool)  # on the env's device, as its steps' dones
""",
    ),
    (
        "%%fragment learner --init",
        """\
torch.manual_seed(cfg.seed)
agent = MAPPOAgent(cfg.obs_dim, cfg.n_actions, cfg.num_agents, hidden=cfg.hidden).to(replica.device)
optimizer = adam(agent.parameters(), cfg.learning_rate, device=replica.device)
update = 0
weights = agent.state_dict()
""",
    ),
    (
        "%%fragment actor --init",
        """\
torch.manual_seed(cfg.seed + 1000 + replica.index)
policy = MAPPOAgent(cfg.obs_dim, cfg.n_actions, cfg.num_agents, hidden=cfg.hidden).to(replica.device)
policy.load_state_dict(weights)
""",
    ),
    (
        "%%fragment actor",
        """\
state, starts = obs, done          # what this step acts on, kept for the learner
action, logp, value = policy.act(obs)
""",
    ),
    (
        "%%fragment env",
        """\
obs, reward, terminated, truncated, info = envs.step(action)
done = terminated | truncated
wb.log("charts/episodic_return", info["episode_return"])
""",
    ),
    (
        "%%fragment learner",
        """\
losses = mappo_update(agent, optimizer, cfg, update, state, action, logp, value, reward, starts,
                      last_obs=obs[-1], last_done=done[-1])
for name, number in losses.items():
    wb.log(name, number)
update += 1
weights = agent.state_dict()
""",
    ),
    (
        "%%fragment actor --every iteration",
        """\
policy.load_state_dict(weights)
""",
    ),
]


def build_fdg(namespace: dict | None = None):
    """The MAPPO FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``MAPPOAgent`` and ``mappo_update`` come from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
