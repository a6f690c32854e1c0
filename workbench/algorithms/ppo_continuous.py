"""PPO (clipped surrogate, GAE) for continuous actions, written as workbench fragments.

Read it top to bottom like CleanRL's ``ppo_continuous_action.py``: the hyperparameters, the
running normalisers, the Gaussian policy, the update, then the fragment cells. The cells have
the dataflow of :mod:`workbench.algorithms.ppo` (discrete PPO):

- ``env`` (init/step): a pool of MuJoCo envs stepped by ``cfg.threads`` threads (EnvPool's
  C++ pool where EnvPool is installed, else gymnasium's, `workbench.envs.make`); it keeps CleanRL's wrappers as fragment state —
  actions clipped to the action space, observations normalised by a running mean/std and
  clipped to ±10, rewards scaled by a running std of the discounted return and clipped to ±10
  — and writes ``obs``, ``reward``, ``done``; it logs the raw ``charts/episodic_return``;
- ``learner`` (init/iteration): writes ``weights``; each iteration runs the PPO update on the
  stacked rollout, the flat gradient going through ``wb.allreduce`` (the sync point);
- ``actor`` (init/step/iteration): samples ``action`` from the Gaussian policy, keeps
  ``state``/``starts``/``logp``/``value`` for the learner, loads new weights every iteration.

The normalisers live in the env fragment, as CleanRL's gym wrappers live in its envs: each env
replica keeps its own statistics, and the actor and learner see only normalised observations.

Example:
    >>> from workbench.algorithms import ppo_continuous
    >>> fdg = ppo_continuous.build_fdg()           # namespace: this module
    >>> sorted(fdg.fragments)
    ['actor', 'env', 'learner']
    >>> run = fdg.run(iterations=3, steps=64, progress=False)   # doctest: +SKIP

``examples/ppo_halfcheetah.py`` trains HalfCheetah-v5 with it from the command line.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import workbench as wb
from workbench.algorithms.batch_rule import minibatch_slices
from workbench.algorithms.config_docs import documented
from workbench.algorithms import optim
from workbench.algorithms.ppo import _layer, _sync_and_clip, bootstrap_time_limits, device_of, host, on_device
from workbench.kernels import gae, normalize_advantages

__all__ = [
    "PPOContinuousConfig",
    "RunningMeanStd",
    "ObsNormalizer",
    "RewardScaler",
    "env_dims",
    "GaussianActorCritic",
    "adam",
    "ppo_continuous_update",
    "FRAGMENT_CELLS",
    "build_fdg",
    "cfg",
]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class PPOContinuousConfig:
    """Every hyperparameter, in one place; the defaults are CleanRL's
    ``ppo_continuous_action.py`` (batch 2048 = ``num_envs × num_steps``, 32 minibatches of 64,
    10 epochs, lr 3e-4 annealed), with the batch collected by 8 envs instead of 1, time
    limits bootstrapped and a smaller initial action std (``log_std_init``)."""

    env_id: str = "HalfCheetah-v5"
    """a gymnasium id with a ``Box`` action space (``"Pendulum-v1"`` needs no MuJoCo)"""
    seed: int = 1
    """seeds torch and the envs (env replica ``i`` uses ``seed + i``)"""
    num_envs: int = 8
    """environments in total, split across the env replicas (keep it even: 2 replicas must split it)"""
    env_backend: str = "auto"
    """``wb.envs.make``'s backend: ``"auto"`` is EnvPool's C++ pool where EnvPool is installed
    and has the id (HalfCheetah-v5 does), gymnasium's envs otherwise; ``"gymnasium"``,
    ``"envpool"`` to choose"""
    threads: int = 1
    """threads stepping each env replica's pool: EnvPool's C++ threads, or for gymnasium's envs a
    ``ThreadedVectorEnv`` when > 1. 1 is fastest on the 2-core dev machine, where the learner
    needs the other core (see ``examples/ppo_halfcheetah.py``); raise it with more cores"""
    num_steps: int = 256
    """steps per iteration (``T``): each iteration learns from ``num_envs × num_steps``"""
    iterations: int = 488
    """iterations of a full run (488 × 2048 ≈ 1M env steps, CleanRL's budget); the learning
    rate anneals over this many"""
    learning_rate: float = 3e-4
    """Adam step size, annealed linearly to 0 over ``iterations`` when ``anneal_lr``"""
    anneal_lr: bool = True
    gamma: float = 0.99
    """discount (also of the return whose running std scales rewards)"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    num_minibatches: int = 32
    """minibatches per epoch"""
    update_epochs: int = 10
    """passes over each iteration's batch"""
    clip_coef: float = 0.2
    """surrogate clipping (and value clipping, with ``clip_vloss``)"""
    clip_vloss: bool = True
    """clip the value update around the rollout's values, as CleanRL"""
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    """stop an update's epochs early once the approximate KL exceeds this (None: never)"""
    hidden: int = 64
    """width of both hidden layers (tanh), policy and value alike"""
    log_std_init: float = -1.0
    """the policy's log-std at the start: −1 (std 0.37). CleanRL starts at 0 (std 1: a
    third of its samples fall outside ±1 and the env clips them); on HalfCheetah-v5 at 1M
    steps −1 gave a higher final return on each held-out seed (median 5,403 against 4,247;
    the ablation is in docs/envpool.md, ``bench_continuous.py --wb-set log_std_init=…``).
    0 for CleanRL's"""
    norm_obs: bool = True
    """normalise observations by a running mean/std (kept by the env fragment), clip to ±10"""
    norm_reward: bool = True
    """scale rewards by the running std of the discounted return, clip to ±10 (the logged
    episodic returns stay raw)"""
    bootstrap_truncated: bool = True
    """where a time limit cut an episode (``truncated`` and not ``terminated``), add
    ``γ·V(final obs)`` to its last reward instead of ending the return there, as SB3 does
    (CleanRL does not: set False for its algorithm to the letter). HalfCheetah never
    terminates: every episode is cut at 1,000 steps, so without it the value learns that
    step 999 of a good gait is worth nothing"""


cfg = PPOContinuousConfig()


# ----------------------------------------------------------------------------- normalisers
class RunningMeanStd:
    """Running mean and variance over batches (Chan et al.'s parallel update), float64, as
    gymnasium's ``RunningMeanStd`` (which CleanRL's wrappers use)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = epsilon

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64)
        b_mean, b_var, b_count = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var = m2 / total
        self.count = total


class ObsNormalizer:
    """``obs → clip((obs - mean) / sqrt(var + eps), ±clip)`` with running statistics updated by
    every batch it normalises (CleanRL's ``NormalizeObservation`` + clipping). Disabled, it
    passes observations through unchanged."""

    def __init__(
        self, shape: tuple[int, ...], *, enabled: bool = True, clip: float = 10.0, epsilon: float = 1e-8
    ) -> None:
        self.rms = RunningMeanStd(shape)
        self.enabled, self.clip, self.epsilon = enabled, clip, epsilon

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return obs
        if not wb.evaluating():  # an evaluation plays with the trained statistics, as they are
            self.rms.update(obs)
        return self.apply(obs)

    def apply(self, obs: np.ndarray) -> np.ndarray:
        """Normalise with the statistics as they are, without updating them (for the final
        observations of ended episodes, which the call on the step's observations counted)."""
        if not self.enabled:
            return obs
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)


class RewardScaler:
    """``reward → clip(reward / sqrt(var(G) + eps), ±clip)`` where ``G`` is each env's running
    discounted return, as CleanRL's ``NormalizeReward`` + clipping, to the letter of gymnasium's
    (0.29 and 1.x): ``G ← G·γ·(1 - terminated) + reward``, so a terminal step starts ``G``
    afresh and a truncated episode (HalfCheetah's, at 1000 steps) carries it on. Disabled, it
    passes rewards through unchanged."""

    def __init__(
        self, num_envs: int, gamma: float, *, enabled: bool = True, clip: float = 10.0, epsilon: float = 1e-8
    ) -> None:
        self.rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma, self.enabled, self.clip, self.epsilon = gamma, enabled, clip, epsilon

    def __call__(self, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return reward
        self.returns = self.returns * self.gamma * (1.0 - terminated) + reward
        self.rms.update(self.returns)
        out = reward / np.sqrt(self.rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)


@functools.cache
def env_dims(env_id: str) -> tuple[int, int]:
    """(observation size, action size) of a gymnasium env with flat Box spaces, read from one
    throw-away instance (so the learner and actor need no env of their own)."""
    import gymnasium

    env = gymnasium.make(env_id)
    try:
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(act_space, gymnasium.spaces.Box):
            raise ValueError(
                f"{env_id} has a {type(act_space).__name__} action space; "
                "continuous PPO needs a Box (use workbench.algorithms.ppo)"
            )
        return int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    finally:
        env.close()


# ----------------------------------------------------------------------------- the network
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class GaussianActorCritic(nn.Module):
    """Separate tanh MLPs for the action mean and the value, and a state-independent log-std
    (one learned number per action dimension, starting at ``log_std_init``: 0 as CleanRL's
    unless said; the config's default is −1)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(), _layer(hidden, 1, std=1.0)
        )
        self.actor_mean = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(), _layer(hidden, act_dim, std=0.01)
        )
        self.actor_logstd = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """log-prob of ``action`` (summed over its dimensions), entropy and value at ``obs``.

        The numbers of ``torch.distributions.Normal(mean, std).log_prob(action).sum(-1)`` and
        ``.entropy().sum(-1)``, written out (the distribution object costs more than the
        network at these sizes)."""
        mean = self.actor_mean(obs)
        logstd = self.actor_logstd.expand_as(mean)
        z = (action - mean) * torch.exp(-logstd)
        logp = (-0.5 * z * z - logstd - _LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + _LOG_SQRT_2PI + logstd).sum(-1)
        return logp, entropy, self.value(obs)

    @torch.inference_mode()
    def act(self, obs: np.ndarray):
        """Sample actions for a batch of observations: (action, log-prob, value) as float32
        NumPy. Actions are NOT clipped (the env clips them; the learner needs the sample).
        While evaluated (``wb.evaluating()``: ``run.evaluate``) the action is the mean."""
        x = on_device(np.asarray(obs, dtype=np.float32), device_of(self))
        mean = self.actor_mean(x)
        logstd = self.actor_logstd.expand_as(mean)
        noise = torch.zeros_like(mean) if wb.evaluating() else torch.randn_like(mean)
        action = mean + noise * logstd.exp()
        logp = (-0.5 * noise * noise - logstd - _LOG_SQRT_2PI).sum(-1)
        return host(action), host(logp), host(self.value(x))


# ----------------------------------------------------------------------------- the update
def adam(params, lr: float) -> torch.optim.Optimizer:
    """CleanRL's Adam (eps 1e-5), fused into one kernel where torch has one for the device:
    the same update, 4-5x faster a step than the per-parameter loop for these small networks
    (140 vs 580-750 us on the 2-core dev machine), 320 steps an iteration. On the CPU it is
    `workbench.algorithms.optim.FusedAdam` (torch's fused kernel without torch.optim's
    one-second import of its compiler on first use).

    >>> type(adam(torch.nn.Linear(2, 1).parameters(), 3e-4)).__name__
    'FusedAdam'
    """
    params = list(params)
    if all(p.device.type == "cpu" for p in params):
        return optim.adam(params, lr, eps=1e-5)
    try:
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    except RuntimeError:  # a device without a fused Adam
        return torch.optim.Adam(params, lr=lr, eps=1e-5)


def ppo_continuous_update(
    agent,
    optimizer,
    cfg,
    update,
    state,
    action,
    logp,
    value,
    reward,
    starts,
    last_obs,
    last_done,
    truncated=None,
    final_obs=None,
) -> dict[str, float]:
    """One PPO update from a ``[T, N, …]`` rollout; returns CleanRL-named losses.

    ``starts[t]`` is 1 where ``state[t]`` begins an episode; ``last_obs`` / ``last_done``
    are the observation and done flag after the final step (they bootstrap the returns).
    ``action`` is ``[T, N, act_dim]``, the unclipped samples the actor drew. With
    ``cfg.bootstrap_truncated``, ``truncated`` (``[T, N]``, cut by a time limit and not
    terminated) and ``final_obs`` (``[T, N, obs_dim]``, normalised as the actor saw its
    observations) add ``γ·V(final_obs)`` to the cut steps' rewards.
    """
    if cfg.anneal_lr:
        frac = max(0.0, 1.0 - update / cfg.iterations)
        optimizer.param_groups[0]["lr"] = frac * cfg.learning_rate
    device = device_of(agent)  # the batch goes where the network is (replica.device)
    with torch.no_grad():
        last_value = host(agent.value(on_device(np.asarray(last_obs, dtype=np.float32), device)))
    if cfg.bootstrap_truncated and truncated is not None:
        reward = bootstrap_time_limits(agent, cfg.gamma, reward, truncated, final_obs)
    advantages, returns = gae(reward, value, starts, last_value, last_done, cfg.gamma, cfg.gae_lambda)

    def flat(x, *shape):
        return on_device(np.ascontiguousarray(np.asarray(x).reshape(-1, *shape), dtype=np.float32), device)

    b_obs = flat(state, state.shape[-1])
    b_act = flat(action, action.shape[-1])
    b_logp, b_val = flat(logp), flat(value)
    b_adv, b_ret = flat(advantages), flat(returns)
    batch = b_obs.shape[0]
    params = [p for p in agent.parameters() if p.requires_grad]
    slices = minibatch_slices(batch, cfg.num_minibatches)
    clipfracs, approx_kl = [], torch.zeros(())
    for _ in range(cfg.update_epochs):
        order = torch.randperm(batch).to(device)  # the CPU generator's draw on every device
        # one gather per epoch, then every minibatch is a contiguous view: the same samples
        # as indexing each minibatch with order[start:end], for 6 copies an epoch, not 6 × 32
        e_obs, e_act, e_logp, e_val, e_adv, e_ret = (x[order] for x in (b_obs, b_act, b_logp, b_val, b_adv, b_ret))
        for mb in slices:
            new_logp, entropy, new_value = agent.evaluate(e_obs[mb], e_act[mb])
            log_ratio = new_logp - e_logp[mb]
            ratio = log_ratio.exp()
            with torch.no_grad():  # a tensor, not .item(): no sync per minibatch
                clipfracs.append(((ratio - 1.0).abs() > cfg.clip_coef).float().mean())
            adv = normalize_advantages(e_adv[mb])
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            old_value, ret = e_val[mb], e_ret[mb]
            if cfg.clip_vloss:
                v_clipped = old_value + (new_value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
                v_loss = 0.5 * torch.max((new_value - ret) ** 2, (v_clipped - ret) ** 2).mean()
            else:
                v_loss = 0.5 * ((new_value - ret) ** 2).mean()
            loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            _sync_and_clip(params, cfg.max_grad_norm)
            optimizer.step()
        with torch.no_grad():  # CleanRL reads (logs, checks target_kl) the epoch's last one only
            approx_kl = ((ratio - 1) - log_ratio).mean()
        if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
            break
    y_pred, y_true = host(b_val), host(b_ret)
    var_y = np.var(y_true)
    metrics = {
        "losses/policy_loss": pg_loss.item(),
        "losses/value_loss": v_loss.item(),
        "losses/entropy": entropy.mean().item(),
        "losses/approx_kl": approx_kl.item(),
        "losses/clipfrac": torch.stack(clipfracs).mean().item(),
        "charts/learning_rate": optimizer.param_groups[0]["lr"],
        "charts/action_std": agent.actor_logstd.exp().mean().item(),
    }
    if var_y > 0:  # undefined when every return is the same (wb.log refuses NaN)
        metrics["losses/explained_variance"] = float(1 - np.var(y_true - y_pred) / var_y)
    return metrics


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body), in ppo.py's order and shape.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment env --init",
        """\
envs = wb.envs.make(cfg.env_id, num_envs=cfg.num_envs // replica.count, seed=cfg.seed + replica.index,
                    threads=cfg.threads, backend=cfg.env_backend)
low, high = envs.action_space.low, envs.action_space.high
obs_norm = ObsNormalizer(envs.observation_shape, enabled=cfg.norm_obs)
reward_scale = RewardScaler(envs.num_envs, cfg.gamma, enabled=cfg.norm_reward)
obs = obs_norm(envs.reset())
done = envs.xp.zeros(envs.num_envs, dtype=bool)  # on the env's device, as its steps' dones
""",
    ),
    (
        "%%fragment learner --init",
        """\
torch.manual_seed(cfg.seed)
agent = GaussianActorCritic(*env_dims(cfg.env_id), hidden=cfg.hidden,
                           log_std_init=cfg.log_std_init).to(replica.device)
optimizer = adam(agent.parameters(), cfg.learning_rate)
update = 0
weights = agent.state_dict()
""",
    ),
    (
        "%%fragment actor --init",
        """\
torch.manual_seed(cfg.seed + 1000 + replica.index)
policy = GaussianActorCritic(*env_dims(cfg.env_id), hidden=cfg.hidden,
                           log_std_init=cfg.log_std_init).to(replica.device)
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
obs, reward, terminated, truncated, info = envs.step(np.clip(action, low, high))
done = terminated | truncated
obs, reward = obs_norm(obs), reward_scale(reward, terminated)
final_obs = obs_norm.apply(info["final_obs"])  # where an episode ended, its last observation
wb.log("charts/episodic_return", info["episode_return"])
""",
    ),
    (
        "%%fragment learner",
        """\
losses = ppo_continuous_update(agent, optimizer, cfg, update, state, action, logp, value, reward,
                               starts, last_obs=obs[-1], last_done=done[-1],
                               truncated=truncated & ~terminated, final_obs=final_obs)  # time limits
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
    """The continuous-PPO FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace``
    (default: this module, so ``cfg``, ``GaussianActorCritic``, ``ppo_continuous_update`` and the
    normalisers come from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
