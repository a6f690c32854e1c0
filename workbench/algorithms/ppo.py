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

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.algorithms.batch_rule import ScalesWithBatch, minibatch_slices
from workbench.algorithms.config_docs import documented
from workbench.algorithms.layers import ObsNorm, Tanh, tanh
from workbench.algorithms.numpy_act import SMALL_BATCH, act_numpy
from workbench.algorithms.numpy_update import MAX_ROWS as NUMPY_MAX_ROWS
from workbench.algorithms.numpy_update import NumpyStep, one_torch_thread
from workbench.algorithms.optim import adam
from workbench.algorithms.ppo_graphs import graphed_act, graphed_update
from workbench.context import current
from workbench.kernels import array_module_of, from_torch, gae, normalize_advantages, to_torch

__all__ = ["PPOConfig", "ActorCritic", "ObsNorm", "adam", "tanh", "ppo_update", "FRAGMENT_CELLS", "build_fdg", "cfg"]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class PPOConfig(ScalesWithBatch):
    """Every PPO hyperparameter, in one place.

    The defaults are tuned for env steps and wall time to solve CartPole-v1 on a CPU (the
    ablation against SB3's rl-zoo settings in ``benchmarks/ppo_sweep.py`` and
    docs/performance.md): 16 envs × 16 steps, 10 full-batch Adam steps per iteration at lr
    3e-3, observations normalised and time limits bootstrapped. ``num_steps``,
    ``update_epochs`` and ``num_minibatches`` left None follow the number of envs
    (`workbench.algorithms.batch_rule`): with 4,096 envs, 16 steps and 2 epochs of 8
    minibatches, so the learner keeps pace with the envs.

    >>> PPOConfig().num_steps, PPOConfig(num_envs=4096).num_steps, PPOConfig(num_steps=64).num_steps
    (16, 16, 64)
    """

    env_id: str = "CartPole-v1"
    """the environment (a NumPy array env for CartPole-v1)"""
    seed: int = 1
    """seeds torch and the envs (replica ``i`` uses ``seed + i``)"""
    num_envs: int = 16
    """environments in total, split across the env replicas (keep it even: 2 replicas must split it)"""
    num_steps: int | None = None
    """steps per iteration (``T``): each iteration learns from ``num_envs × num_steps``
    (None: 256 // num_envs within [16, 128], the batch rule)"""
    iterations: int = 400
    """the most iterations a run takes (it stops early once solved)"""
    learning_rate: float = 3e-3
    """Adam step size, annealed linearly to 0 over ``iterations`` when ``anneal_lr``"""
    anneal_lr: bool = True
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    num_minibatches: int | None = None
    """minibatches per epoch (None: 1 up to a 1,024-sample batch, else 8)"""
    update_epochs: int | None = None
    """passes over each iteration's batch (None: 10 up to a 1,024-sample batch, else 2)"""
    clip_coef: float = 0.2
    """surrogate clipping (and value clipping, with ``clip_vloss``)"""
    norm_adv: bool = True
    """normalise each minibatch's advantages (mean 0, std 1)"""
    clip_vloss: bool = False
    """clip the value update around the rollout's values, as CleanRL (cost env steps here)"""
    bootstrap_truncated: bool = True
    """where a time limit cut an episode (``truncated`` and not ``terminated``), add
    ``γ·V(final obs)`` to its last reward, as SB3 does, instead of treating the cut as the
    episode's end (CartPole-v1 cuts at 500 steps: ending the return there teaches the value
    that the best states are worth less; it cost ~20 % more env steps to solve)"""
    norm_obs: bool = True
    """normalise observations by the running mean/std of those learned from, clip to ±10
    (`ObsNorm`: the statistics travel with the weights, so every placement sees the same)"""
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    """width of both hidden layers"""
    target_return: float = 475.0
    """solved: the mean of the last 20 episode returns reaches this"""
    cuda_graphs: bool = True
    """on a GPU, replay each iteration's update as one CUDA graph (same numbers, ~1 launch
    instead of ~1,700; a single learner only: `workbench.algorithms.ppo_graphs`)"""
    _auto: tuple = field(default=(), repr=False, compare=False)


cfg = PPOConfig()


# ----------------------------------------------------------------------------- the network
def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy (logits) and the value, as CleanRL; with
    ``norm_obs``, both read observations through one `ObsNorm`."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, norm_obs: bool = False) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, hidden), Tanh(), _layer(hidden, hidden), Tanh(), _layer(hidden, 1, std=1.0)
        )
        self.actor = nn.Sequential(
            _layer(obs_dim, hidden), Tanh(), _layer(hidden, hidden), Tanh(), _layer(hidden, n_actions, std=0.01)
        )
        self.obs_norm = ObsNorm(obs_dim) if norm_obs else None

    def __getstate__(self) -> dict:
        # the NumPy paths' caches hold views of this process's tensors (and the optimizer):
        # a pickle or a copy rebuilds them from its own
        state = dict(super().__getstate__())
        state.pop("_numpy_act", None)
        state.pop("_numpy_update", None)
        return state

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` as the networks read it (through `ObsNorm` when there is one)."""
        return obs if self.obs_norm is None else self.obs_norm.forward(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return forward(self.critic, self.normalize(obs)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """log-prob of ``action``, entropy and value at ``obs`` (with gradients).

        The same numbers as ``torch.distributions.Categorical(logits=…)``'s ``log_prob`` and
        ``entropy``, from one ``log_softmax`` (the distribution object costs more than the
        network at these sizes)."""
        obs = self.normalize(obs)
        logp_all = torch.log_softmax(forward(self.actor, obs), -1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, action[:, None]).squeeze(-1), entropy, forward(self.critic, obs).squeeze(-1)

    def act(self, obs: np.ndarray):
        """Sample actions for a batch of observations: (action, log-prob, value) in the
        observations' kind of array.

        NumPy observations give NumPy back (a device→host copy if the network is on a GPU);
        CuPy observations from a GPU env give CuPy back through DLPack, so with the env and
        the network on one GPU nothing crosses to the host. While evaluated
        (``wb.evaluating()``: ``run.evaluate``) it takes the most likely action."""
        if wb.evaluating():
            with torch.inference_mode():
                action, logp, value = _sample(self, on_device(obs, device_of(self)), greedy=True)
                return like(obs, action), like(obs, logp), like(obs, value)
        if isinstance(obs, np.ndarray) and obs.ndim == 2 and obs.shape[0] <= SMALL_BATCH and self.fast_numpy_act:
            # a few rows: NumPy beats torch's per-op dispatch (and needs no inference mode,
            # whose entry and exit cost ~7 % of a 4-row act)
            out = act_numpy(self, obs)
            if out is not None:
                return out
        with torch.inference_mode():
            x = on_device(obs, device_of(self))
            out = graphed_act(self, _sample, x) if x.is_cuda and self.cuda_graphs else None
            action, logp, value = out if out is not None else _sample(self, x)
            return like(obs, action), like(obs, logp), like(obs, value)

    #: on a GPU, replay ``act``'s kernels as one CUDA graph (`workbench.algorithms.ppo_graphs`)
    cuda_graphs = True
    #: on the CPU, act for up to ``SMALL_BATCH`` observations in NumPy (`workbench.algorithms.numpy_act`)
    fast_numpy_act = True
    #: on the CPU, ``ppo_update``'s minibatch steps in NumPy (`workbench.algorithms.numpy_update`)
    fast_numpy_update = True


def _sample(
    agent: ActorCritic, x: torch.Tensor, greedy: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(action, log-prob, value) tensors for observations ``x``: what ``act`` computes
    (``greedy``: the most likely action instead of a sample)."""
    x = agent.normalize(x)
    logp_all = torch.log_softmax(forward(agent.actor, x), -1)
    action = logp_all.argmax(-1, keepdim=True) if greedy else torch.multinomial(logp_all.exp(), 1)
    logp = logp_all.gather(-1, action).squeeze(-1)
    return action.squeeze(-1), logp, forward(agent.critic, x).squeeze(-1)


def forward(seq: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``seq(x)`` without ``nn.Module.__call__``'s bookkeeping per layer: the same kernels
    in the same order, so the same numbers, for 10–25 % less time per call at the actor's
    sizes (measured in ``benchmarks/bench_ab.py``). A module with hooks goes through its
    ``__call__`` as usual.

    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), Tanh(), nn.Linear(4, 2))
    >>> x = torch.ones(2, 3)
    >>> bool((forward(net, x) == net(x)).all())
    True
    """
    if seq._forward_hooks or seq._forward_pre_hooks:
        return seq(x)
    for layer in seq:
        if layer._forward_hooks or layer._forward_pre_hooks:
            x = layer(x)
        elif type(layer) is nn.Linear:
            x = F.linear(x, layer.weight, layer.bias)
        elif type(layer) is Tanh:
            x = tanh(x)
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


def like(array, tensor: torch.Tensor):
    """``tensor`` as the kind of array ``array`` is: CuPy through DLPack (no copy) when
    ``array`` is CuPy and ``tensor`` on a GPU, else NumPy (`host`)."""
    if tensor.device.type == "cuda" and type(array).__module__.startswith("cupy"):
        return from_torch(tensor)
    return host(tensor)


def flat_batch(array, device: torch.device, dtype=None) -> torch.Tensor:
    """A ``[T, N, …]`` rollout array as one ``[T·N, …]`` tensor on ``device`` (NumPy or
    CuPy; no copy where the memory is already there and contiguous)."""
    xp = array_module_of(array)
    array = array.reshape(-1, *array.shape[2:])
    if dtype is not None and array.dtype != dtype:
        array = array.astype(dtype)
    return on_device(xp.ascontiguousarray(array), device)


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


def ppo_update(
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
    ``truncated[t]`` (optional) is 1 where a time limit, not the task, ended the episode at
    step ``t``, and ``final_obs[t]`` that episode's last observation: with
    ``cfg.bootstrap_truncated`` those steps' rewards get ``γ·V(final obs)``.
    """
    if cfg.anneal_lr:
        frac = max(0.0, 1.0 - update / cfg.iterations)
        optimizer.param_groups[0]["lr"] = frac * cfg.learning_rate
    device = device_of(agent)  # the batch goes where the network is (replica.device)
    if truncated is not None and final_obs is not None and getattr(cfg, "bootstrap_truncated", True):
        reward = bootstrap_time_limits(agent, cfg.gamma, reward, truncated, final_obs)
    obs = flat_batch(state, device)
    obs_norm = getattr(agent, "obs_norm", None)
    if obs_norm is not None:  # first: the epochs then optimise the policy the actors run next
        obs_norm.update(obs)
    with torch.no_grad():  # in the rollout's kind of array: GAE runs where the rollout is
        last_value = like(reward, agent.value(on_device(last_obs, device)))
    advantages, returns = gae(reward, value, starts, last_value, last_done, cfg.gamma, cfg.gae_lambda)

    batch = (
        obs,
        flat_batch(action, device),
        flat_batch(logp, device),
        flat_batch(advantages, device, np.float32),
        flat_batch(returns, device, np.float32),
    )
    params = [p for p in agent.parameters() if p.requires_grad]
    slices = minibatch_slices(batch[0].shape[0], cfg.num_minibatches)

    def step(mb: torch.Tensor, batch: tuple) -> tuple:
        return _minibatch_step(agent, optimizer, cfg, params, batch, mb)

    out = None
    if device.type == "cuda" and getattr(cfg, "cuda_graphs", True) and _one_learner():  # one graph per iteration
        out = graphed_update(
            agent,
            optimizer,
            (cfg.clip_coef, cfg.ent_coef, cfg.vf_coef, cfg.max_grad_norm, _norm_adv(cfg), _clip_vloss(cfg)),
            batch,
            cfg.update_epochs,
            slices,
            step,
        )
    fast = None
    if out is None and device.type == "cpu" and slices[0].stop <= NUMPY_MAX_ROWS and _one_learner():
        fast = NumpyStep.build(agent, optimizer, cfg)  # forward and backward in NumPy: no per-op dispatch
    if fast is not None:
        with torch.no_grad():
            arrays = (agent.normalize(batch[0]).numpy(), *(x.numpy() for x in batch[1:]))
        with one_torch_thread():  # see numpy_update: torch's pool must not spin beside NumPy
            for _ in range(cfg.update_epochs):
                order = torch.randperm(arrays[0].shape[0]).numpy()  # the same generator as the torch path
                for mb in slices:
                    out = fast(arrays, order[mb])
    elif out is None:
        size = batch[0].shape[0]
        for _ in range(cfg.update_epochs):
            # on the CPU: the CPU generator, as always; on a GPU: its own (no host copy)
            order = torch.randperm(size) if device.type == "cpu" else torch.randperm(size, device=device)
            for mb in slices:
                out = step(order[mb], batch)
    pg_loss, v_loss, entropy = out
    return {
        "losses/policy_loss": float(pg_loss),
        "losses/value_loss": float(v_loss),
        "losses/entropy": float(entropy),
        "charts/learning_rate": optimizer.param_groups[0]["lr"],
    }


def bootstrap_time_limits(agent, gamma: float, reward, truncated, final_obs):
    """``reward + γ·V(final_obs)`` where ``truncated`` (a ``[T, N]`` rollout), with the
    network that collected the rollout (before this update changes it), in the rollout's
    kind of array. On the CPU only the cut rows are evaluated (a few per iteration); on a
    GPU all of them, so nothing waits for the host to count them.

    >>> agent = ActorCritic(4, 2)
    >>> reward, cut = np.ones((2, 3), np.float32), np.zeros((2, 3), bool)
    >>> cut[1, 2] = True
    >>> final_obs = np.ones((2, 3, 4), np.float32)
    >>> out = bootstrap_time_limits(agent, 0.99, reward, cut, final_obs)
    >>> v = agent.value(torch.ones(1, 4)).item()
    >>> bool((out[~cut] == 1).all()), bool(abs(out[1, 2] - (1 + 0.99 * v)) < 1e-6)
    (True, True)
    """
    device = device_of(agent)
    xp = array_module_of(reward)
    if xp is np:
        rows = np.flatnonzero(np.asarray(truncated).reshape(-1))
        if rows.size == 0:
            return reward
        with torch.no_grad():
            v = agent.value(flat_batch(final_obs, device)[torch.from_numpy(rows).to(device)])
        out = np.array(reward, np.float32)
        out.reshape(-1)[rows] += gamma * host(v)
        return out
    with torch.no_grad():
        v = agent.value(flat_batch(final_obs, device)).reshape(reward.shape)
    return reward + gamma * like(reward, v) * truncated


def _minibatch_step(agent, optimizer, cfg, params, batch: tuple, mb: torch.Tensor) -> tuple:
    """One Adam step on the minibatch ``mb`` (indices into ``batch``); returns the policy
    loss, value loss and mean entropy as tensors (read once, after the last step)."""
    b_obs, b_act, b_logp, b_adv, b_ret = (x.index_select(0, mb) for x in batch)
    new_logp, entropy, new_value = agent.evaluate(b_obs, b_act)
    ratio = (new_logp - b_logp).exp()
    adv = normalize_advantages(b_adv) if _norm_adv(cfg) else b_adv
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    if _clip_vloss(cfg):  # around the rollout's values (returns − advantages)
        old_value = b_ret - b_adv
        v_clipped = old_value + (new_value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((new_value - b_ret) ** 2, (v_clipped - b_ret) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_value - b_ret) ** 2).mean()
    loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
    optimizer.zero_grad()
    loss.backward()
    _sync_and_clip(params, cfg.max_grad_norm)
    optimizer.step()
    # detached: a loss kept with its autograd graph would hold that graph alive into the next
    # step (and, on a GPU, across the CUDA graph's capture)
    return pg_loss.detach(), v_loss.detach(), entropy.mean().detach()


def _norm_adv(cfg) -> bool:
    return getattr(cfg, "norm_adv", True)  # a config made before the field: as it was


def _clip_vloss(cfg) -> bool:
    return getattr(cfg, "clip_vloss", False)


def _one_learner() -> bool:
    """No all-reduce across learners (``wb.allreduce`` is the identity here)."""
    ctx = current()
    return ctx is None or ctx.reducer is None


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body). The notebook holds them verbatim.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment env --init",
        """\
envs = wb.envs.make(cfg.env_id, num_envs=cfg.num_envs // replica.count, seed=cfg.seed + replica.index,
                    device=replica.device)
obs = envs.reset()
done = envs.xp.zeros(envs.num_envs, dtype=bool)  # on the env's device, as its steps' dones
""",
    ),
    (
        "%%fragment learner --init",
        """\
torch.manual_seed(cfg.seed)
agent = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden, norm_obs=cfg.norm_obs).to(replica.device)
# CPU: torch's fused Adam kernel without torch.optim's 1-second first use (workbench.algorithms.optim);
# a GPU gets torch.optim.Adam (there the whole update replays as a CUDA graph)
optimizer = adam(agent.parameters(), cfg.learning_rate, device=replica.device)
update = 0
weights = agent.state_dict()
""",
    ),
    (
        "%%fragment actor --init",
        """\
torch.manual_seed(cfg.seed + 1000 + replica.index)
policy = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden, norm_obs=cfg.norm_obs).to(replica.device)
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
final_obs = info["final_obs"]      # where an episode ended, its last observation
wb.log("charts/episodic_return", info["episode_return"])
""",
    ),
    (
        "%%fragment learner",
        """\
losses = ppo_update(agent, optimizer, cfg, update, state, action, logp, value, reward, starts,
                    last_obs=obs[-1], last_done=done[-1],
                    truncated=truncated & ~terminated, final_obs=final_obs)  # time limits: bootstrap
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
    """The PPO FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``ActorCritic`` and ``ppo_update`` come from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
