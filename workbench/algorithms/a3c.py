"""A3C (asynchronous advantage actor-critic) for discrete actions, written as workbench fragments.

Read it top to bottom like CleanRL's ``ppo.py``: the hyperparameters, the gradient an actor
computes, the step the learner takes with it, then the fragment cells.
``notebooks/a3c.ipynb`` holds the same cells, byte for byte, and builds the same FDG (a test
checks it).

The algorithm is the paper's (Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement
Learning"): each actor replica runs ``num_steps`` (``T``) steps with its own copy of the policy,
computes the n-step actor-critic gradient on that rollout with the parameters it acted with, and
hands the gradient — not the rollout — to one learner. The learner applies each gradient as it
arrives and sends the newest weights back to the replica that sent it. The cells say nothing
about replicas or timing; the distribution policy decides:

- ``inline`` (one replica of everything, synchronous): plain A2C, one update per iteration;
- ``Async``: ``k`` actor replicas, the learner steps once per arriving gradient (``k`` updates
  per iteration, each from ``num_envs / k`` environments), with no barrier between replicas.

Example:
    >>> from workbench.algorithms import a3c
    >>> fdg = a3c.build_fdg()                      # namespace: this module
    >>> sorted(fdg.fragments)
    ['actor', 'env', 'learner']
    >>> run = fdg.run(iterations=3, steps=8, progress=False)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import workbench as wb
from workbench.algorithms.config_docs import documented
from workbench.algorithms.optim import adam
from workbench.algorithms.ppo import ActorCritic, device_of, flat_batch, host, like, on_device
from workbench.kernels import array_module_of, gae, normalize_advantages

__all__ = [
    "adam",
    "A3CConfig",
    "ActorCritic",
    "stack_steps",
    "a3c_gradients",
    "apply_gradients",
    "FRAGMENT_CELLS",
    "build_fdg",
    "cfg",
]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class A3CConfig:
    """Every A3C hyperparameter, in one place.

    The defaults are tuned for wall time to solve CartPole-v1 on a CPU under the inline policy
    (A2C): many environments and short rollouts, one cheap update per iteration. Nothing in them
    relies on a large batch — advantages are normalised per rollout and gradients clipped — so
    they hold when ``Async`` splits the environments over 2–4 actor replicas and the learner
    takes 2–4 smaller steps per iteration."""

    env_id: str = "CartPole-v1"
    """the environment (a NumPy array env for CartPole-v1)"""
    seed: int = 1
    """seeds torch and the envs (replica ``i`` uses ``seed + i``)"""
    num_envs: int = 32
    """environments in total, split across the env replicas (keep it divisible by 4: up to 4
    replicas must split it)"""
    num_steps: int = 8
    """steps per iteration (``T``, the n of the n-step returns): each gradient comes from
    ``num_envs / replicas × num_steps`` transitions"""
    iterations: int = 2000
    """the most iterations a run takes (it stops early once solved)"""
    learning_rate: float = 2e-3
    """Adam step size (constant: under Async the number of updates per iteration varies).
    3e-3 is faster at 32 envs per gradient but collapsed once in 6 seeds at 16; 2e-3 solved
    every seed tried at 8, 16 and 32 envs per gradient"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 1.0
    """GAE's lambda; 1.0 gives the paper's n-step returns (bootstrapped from the value after
    the rollout's last step)"""
    normalize_advantages: bool = True
    """normalise advantages over each rollout (per gradient, so per replica under Async)"""
    ent_coef: float = 0.01
    """entropy bonus (the paper's 0.01): guards small, stale-gradient updates against a
    policy that collapses to one action"""
    vf_coef: float = 0.5
    """value-loss weight"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip, applied by the learner to each gradient it receives"""
    hidden: int = 64
    """width of both hidden layers"""
    target_return: float = 475.0
    """solved: the mean of the last 20 episode returns reaches this"""


cfg = A3CConfig()


# ----------------------------------------------------------------------------- the gradient
def stack_steps(rollout: list[tuple]) -> tuple:
    """The ``T`` per-step tuples an actor kept, as one ``[T, …]`` array per field, stacked in
    the arrays' own module: NumPy stays on the host, CuPy (a GPU env's arrays) on its GPU.

    >>> steps = [(np.zeros((2, 4)), np.array([True, False])) for _ in range(3)]
    >>> [a.shape for a in stack_steps(steps)]
    [(3, 2, 4), (3, 2)]
    """
    return tuple(array_module_of(field[0]).stack(field) for field in zip(*rollout))


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def a3c_gradients(policy, cfg, state, action, reward, starts, last_obs, last_done) -> np.ndarray:
    """The actor-critic gradient of one replica's ``[T, N, …]`` rollout, as one flat float32
    NumPy array (parameters in ``policy.parameters()`` order); logs the losses with ``wb.log``.

    The loss is computed with ``policy``'s current parameters (the ones it acted with):
    policy gradient on the (n-step / GAE) advantage, ``vf_coef`` × value regression to the
    returns, minus ``ent_coef`` × entropy. ``starts[t]`` is 1 where ``state[t]`` begins an
    episode; ``last_obs`` / ``last_done`` are the observation and done flag after the final step
    (they bootstrap the returns). ``policy``'s own ``.grad`` fields are left untouched.

    The rollout may be NumPy or CuPy (a GPU env's): GAE runs where the rollout is and the
    batch goes to ``policy``'s device; only the flat gradient crosses to the host.
    """
    device = device_of(policy)  # the batch goes where the network is (replica.device)
    xp = array_module_of(reward)
    b_obs = flat_batch(state, device, np.float32)
    b_act = flat_batch(action, device, np.int64)
    logp, entropy, value = policy.evaluate(b_obs, b_act)
    with torch.no_grad():  # in the rollout's kind of array, as the values below
        last_value = like(reward, policy.value(on_device(xp.asarray(last_obs, dtype=np.float32), device)))
    values = like(reward, value.detach()).reshape(reward.shape)
    advantages, returns = gae(reward, values, starts, last_value, last_done, cfg.gamma, cfg.gae_lambda)
    b_adv = flat_batch(advantages, device, np.float32)
    b_ret = flat_batch(returns, device, np.float32)
    if cfg.normalize_advantages:
        b_adv = normalize_advantages(b_adv)

    pg_loss = -(b_adv * logp).mean()
    v_loss = 0.5 * ((value - b_ret) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
    grads = torch.autograd.grad(loss, _params(policy))
    wb.log("losses/policy_loss", pg_loss.item())
    wb.log("losses/value_loss", v_loss.item())
    wb.log("losses/entropy", ent.item())
    # one device→host copy an iteration: the learner may be elsewhere (Async hands it over)
    return host(torch.cat([g.reshape(-1) for g in grads])).astype(np.float32, copy=False)


# ----------------------------------------------------------------------------- the update
def apply_gradients(model, optimizer, flat_grads, cfg) -> float:
    """Write ``flat_grads`` (from :func:`a3c_gradients` on a model of the same shape) into
    ``model``'s ``.grad``, clip the global norm to ``cfg.max_grad_norm`` and step ``optimizer``.
    Returns the gradient's norm before clipping."""
    params = _params(model)
    flat = torch.as_tensor(np.asarray(flat_grads, dtype=np.float32), device=device_of(model))
    sizes = [p.numel() for p in params]
    if flat.numel() != sum(sizes):
        raise ValueError(
            f"the gradient has {flat.numel()} numbers but the model {sum(sizes)} "
            "parameters: actor and learner networks differ"
        )
    norm = flat.norm()
    if cfg.max_grad_norm:
        flat = flat * (cfg.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
    for p, g in zip(params, flat.split(sizes)):
        p.grad = g.view_as(p).clone()
    optimizer.step()
    return norm.item()


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
model = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
optimizer = adam(model.parameters(), cfg.learning_rate, device=replica.device)
weights = model.state_dict()
""",
    ),
    (
        "%%fragment actor --init",
        """\
torch.manual_seed(cfg.seed + 1000 + replica.index)
policy = ActorCritic(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
policy.load_state_dict(weights)
synced = weights
rollout = []                       # this replica's (state, starts, action) of each step
""",
    ),
    (
        "%%fragment actor",
        """\
if weights is not synced:          # fresh weights from the learner: load them once
    policy.load_state_dict(weights)
    synced = weights
state, starts = obs, done          # what this step acts on, kept for the gradient
action = policy.act(obs)[0]
rollout.append((state, starts, action))
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
        "%%fragment actor --every iteration",
        """\
state_T, starts_T, action_T = stack_steps(rollout)   # this iteration's T steps: [T, N, …]
rollout.clear()
grads = a3c_gradients(policy, cfg, state_T, action_T, reward, starts_T,
                      last_obs=obs[-1], last_done=done[-1])
""",
    ),
    (
        "%%fragment learner",
        """\
grad_norm = apply_gradients(model, optimizer, grads, cfg)
wb.log("losses/grad_norm", grad_norm)
weights = model.state_dict()
""",
    ),
]


def build_fdg(namespace: dict | None = None):
    """The A3C FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``ActorCritic``, ``stack_steps``, ``a3c_gradients`` and
    ``apply_gradients`` come from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
