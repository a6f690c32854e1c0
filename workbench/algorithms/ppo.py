"""PPO (clipped surrogate, GAE) for discrete actions, written as workbench fragments.

Read it top to bottom like CleanRL's ``ppo.py``: the hyperparameters, the network, the
update, then the four fragment cells. ``notebooks/quickstart.ipynb`` holds the same cells,
byte for byte, and builds the same FDG (a test checks it).

Example:
    >>> from workbench.algorithms import ppo
    >>> fdg = ppo.build_fdg()                      # namespace: this module
    >>> sorted(fdg.fragments)
    ['actor', 'env', 'learner']
    >>> run = fdg.run(iterations=3, steps=8, progress=False)   # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.algorithms.config_docs import documented
from workbench.kernels import gae, normalize_advantages, to_torch

__all__ = ["PPOConfig", "ActorCritic", "ppo_update", "FRAGMENT_CELLS", "build_fdg", "cfg"]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class PPOConfig:
    """Every PPO hyperparameter, in one place.

    The defaults are tuned for wall time to solve CartPole-v1 on a CPU (see
    ``benchmarks/ppo_sweep.py``): a large batch (32 envs × 32 steps) and few, full-batch
    gradient steps (10 per iteration), since one Adam step of this small MLP costs about as
    much at batch 1024 as at 256."""

    env_id: str = "CartPole-v1"
    """the environment (a NumPy array env for CartPole-v1)"""
    seed: int = 1
    """seeds torch and the envs (replica ``i`` uses ``seed + i``)"""
    num_envs: int = 32
    """environments in total, split across the env replicas (keep it even: 2 replicas must split it)"""
    num_steps: int = 32
    """steps per iteration (``T``): each iteration learns from ``num_envs × num_steps``"""
    iterations: int = 200
    """the most iterations a run takes (it stops early once solved)"""
    learning_rate: float = 3e-3
    """Adam step size, annealed linearly to 0 over ``iterations`` when ``anneal_lr``"""
    anneal_lr: bool = True
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    num_minibatches: int = 1
    """minibatches per epoch"""
    update_epochs: int = 10
    """passes over each iteration's batch"""
    clip_coef: float = 0.2
    """surrogate clipping"""
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    """width of both hidden layers"""
    target_return: float = 475.0
    """solved: the mean of the last 20 episode returns reaches this"""


cfg = PPOConfig()


# ----------------------------------------------------------------------------- the network
def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy (logits) and the value, as CleanRL."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.critic = nn.Sequential(_layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden),
                                    nn.Tanh(), _layer(hidden, 1, std=1.0))
        self.actor = nn.Sequential(_layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden),
                                   nn.Tanh(), _layer(hidden, n_actions, std=0.01))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """log-prob of ``action``, entropy and value at ``obs`` (with gradients).

        The same numbers as ``torch.distributions.Categorical(logits=…)``'s ``log_prob`` and
        ``entropy``, from one ``log_softmax`` (the distribution object costs more than the
        network at these sizes)."""
        logp_all = torch.log_softmax(self.actor(obs), -1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, action[:, None]).squeeze(-1), entropy, self.value(obs)

    @torch.inference_mode()
    def act(self, obs: np.ndarray):
        """Sample actions for a batch of observations: (action, log-prob, value) as NumPy.

        ``obs`` (NumPy, or CuPy from a GPU env) goes to the network's device first."""
        x = on_device(obs, device_of(self))
        logp_all = torch.log_softmax(forward(self.actor, x), -1)
        action = torch.multinomial(logp_all.exp(), 1)
        logp = logp_all.gather(-1, action).squeeze(-1)
        return host(action.squeeze(-1)), host(logp), host(forward(self.critic, x).squeeze(-1))


def forward(seq: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``seq(x)`` for the actor's every-step call, without ``nn.Module.__call__``'s
    bookkeeping per layer: the same kernels in the same order, so the same numbers, for
    10–25 % less time per step at these sizes (measured in ``benchmarks/bench_ab.py``). A
    layer with hooks goes through its ``__call__`` as usual.

    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    >>> x = torch.ones(2, 3)
    >>> bool((forward(net, x) == net(x)).all())
    True
    """
    for layer in seq:
        if layer._forward_hooks or layer._forward_pre_hooks:
            x = layer(x)
        elif type(layer) is nn.Linear:
            x = F.linear(x, layer.weight, layer.bias)
        elif type(layer) is nn.Tanh:
            x = torch.tanh(x)
        else:
            x = layer(x)
    return x


# ----------------------------------------------------------------------------- devices
def device_of(module: nn.Module) -> torch.device:
    """The device a network's parameters are on (the init cell put them on ``replica.device``)."""
    return next(module.parameters()).device


def on_device(array, device: torch.device) -> torch.Tensor:
    """A tensor of ``array`` (NumPy: shared memory; CuPy: DLPack, no copy) on ``device``;
    on the CPU no copy is made, so CPU results are what they were before devices."""
    tensor = to_torch(array) if type(array).__module__.startswith("cupy") else torch.from_numpy(array)
    return tensor if tensor.device == device else tensor.to(device)


def host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as NumPy (a device→host copy for a CUDA tensor, a view on the CPU)."""
    return tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()


# ----------------------------------------------------------------------------- the update
def _sync_and_clip(params: list[torch.Tensor], max_grad_norm: float | None) -> None:
    """The gradient sync point, then global-norm clipping, on one flat gradient vector.

    ``wb.allreduce`` is called once on the concatenated gradients (identity with a single
    learner, an average across learners otherwise); clipping matches
    ``nn.utils.clip_grad_norm_`` (scale by ``max_norm / (norm + 1e-6)`` when above it)."""
    grads = [p.grad for p in params]
    flat = wb.allreduce(torch.cat([g.reshape(-1) for g in grads]))
    if max_grad_norm:
        flat = flat * (max_grad_norm / (flat.norm() + 1e-6)).clamp(max=1.0)
    torch._foreach_copy_(grads, [c.view_as(g) for c, g in zip(flat.split([g.numel() for g in grads]), grads)])


def ppo_update(agent, optimizer, cfg, update, state, action, logp, value, reward, starts,
               last_obs, last_done) -> dict[str, float]:
    """One PPO update from a ``[T, N, …]`` rollout; returns CleanRL-named losses.

    ``starts[t]`` is 1 where ``state[t]`` begins an episode; ``last_obs`` / ``last_done``
    are the observation and done flag after the final step (they bootstrap the returns).
    """
    if cfg.anneal_lr:
        frac = max(0.0, 1.0 - update / cfg.iterations)
        optimizer.param_groups[0]["lr"] = frac * cfg.learning_rate
    device = device_of(agent)  # the batch goes where the network is (replica.device)
    with torch.no_grad():
        last_value = host(agent.value(on_device(last_obs, device)))
    advantages, returns = gae(reward, value, starts, last_value, last_done, cfg.gamma, cfg.gae_lambda)

    b_obs = on_device(state.reshape(-1, state.shape[-1]), device)
    b_act = on_device(action.reshape(-1), device)
    b_logp = on_device(logp.reshape(-1), device)
    b_adv = on_device(np.ascontiguousarray(advantages.reshape(-1), dtype=np.float32), device)
    b_ret = on_device(np.ascontiguousarray(returns.reshape(-1), dtype=np.float32), device)
    batch = b_obs.shape[0]
    params = [p for p in agent.parameters() if p.requires_grad]
    mb_size = batch // cfg.num_minibatches
    for _ in range(cfg.update_epochs):
        # drawn on the CPU generator on every device: the same minibatches as on a CPU run
        order = torch.randperm(batch).to(device)
        for start in range(0, batch, mb_size):
            mb = order[start:start + mb_size]
            new_logp, entropy, new_value = agent.evaluate(b_obs[mb], b_act[mb])
            ratio = (new_logp - b_logp[mb]).exp()
            adv = normalize_advantages(b_adv[mb])
            pg_loss = torch.max(-adv * ratio,
                                -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            v_loss = 0.5 * ((new_value - b_ret[mb]) ** 2).mean()
            loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            _sync_and_clip(params, cfg.max_grad_norm)
            optimizer.step()
    return {"losses/policy_loss": pg_loss.item(), "losses/value_loss": v_loss.item(),
            "losses/entropy": entropy.mean().item(),
            "charts/learning_rate": optimizer.param_groups[0]["lr"]}


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body). The notebook holds them verbatim.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    ("%%fragment env --init", """\
envs = wb.envs.make(cfg.env_id, num_envs=cfg.num_envs // replica.count, seed=cfg.seed + replica.index)
obs = envs.reset()
done = np.zeros(envs.num_envs, dtype=bool)
"""),
    ("%%fragment learner --init", """\
torch.manual_seed(cfg.seed)
agent = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
update = 0
weights = agent.state_dict()
"""),
    ("%%fragment actor --init", """\
torch.manual_seed(cfg.seed + 1000 + replica.index)
policy = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
policy.load_state_dict(weights)
"""),
    ("%%fragment actor", """\
state, starts = obs, done          # what this step acts on, kept for the learner
action, logp, value = policy.act(obs)
"""),
    ("%%fragment env", """\
obs, reward, terminated, truncated, info = envs.step(action)
done = terminated | truncated
wb.log("charts/episodic_return", info["episode_return"])
"""),
    ("%%fragment learner", """\
losses = ppo_update(agent, optimizer, cfg, update, state, action, logp, value, reward, starts,
                    last_obs=obs[-1], last_done=done[-1])
for name, number in losses.items():
    wb.log(name, number)
update += 1
weights = agent.state_dict()
"""),
    ("%%fragment actor --every iteration", """\
policy.load_state_dict(weights)
"""),
]


def build_fdg(namespace: dict | None = None):
    """The PPO FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``ActorCritic`` and ``ppo_update`` come from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
