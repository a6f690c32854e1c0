"""DQN (replay buffer, target network, ε-greedy) for discrete actions, as workbench fragments.

Read it top to bottom like CleanRL's ``dqn.py``: the hyperparameters, the Q-network, the
ε schedule, the replay buffer, the update, then the fragment cells.
``notebooks/dqn.ipynb`` holds the same cells, byte for byte (a test checks it).

Off-policy, the way the FDG sees it: the actor acts ε-greedily on the latest weights
every step; the env steps; the learner gets the iteration's transitions stacked
``[T, N, …]``, adds them to its replay buffer and takes ``T × N / train_frequency``
gradient steps on samples from it. The buffer lives inside the learner here (nothing but
transitions and weights cross processes); docs/off_policy.md shows the other way, the
buffer as its own fragment, and what each costs on the wire.

Schedules read where the run is — ``wb.env_steps()`` — so ε, the learning start and the
target-network syncs fall on the same env steps under every policy and after a resume.

Example:
    >>> from workbench.algorithms import dqn
    >>> fdg = dqn.build_fdg()
    >>> sorted(fdg.fragments)
    ['actor', 'env', 'learner']
    >>> dqn.linear_schedule(1.0, 0.05, 1000, 500)
    0.525
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import workbench as wb
from workbench.algorithms.config_docs import documented
from workbench.algorithms.optim import adam
from workbench.algorithms.ppo import device_of, like, on_device
from workbench.kernels import array_module_of, get_xp, to_torch

__all__ = [
    "adam",
    "DQNConfig",
    "QNetwork",
    "ReplayBuffer",
    "linear_schedule",
    "act",
    "dqn_update",
    "FRAGMENT_CELLS",
    "BUFFER_FRAGMENT_CELLS",
    "build_fdg",
    "cfg",
]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class DQNConfig:
    """Every DQN hyperparameter, in one place (CleanRL's names).

    Env-step quantities (``learning_starts``, ``target_network_frequency``,
    ``exploration_steps``) count all envs together, as ``wb.env_steps()`` does."""

    env_id: str = "CartPole-v1"
    """the environment (a NumPy array env for CartPole-v1)"""
    seed: int = 1
    """seeds torch, the envs (replica ``i`` uses ``seed + i``) and the buffer's sampling"""
    num_envs: int = 4
    """environments in total, split across the env replicas (keep it even)"""
    num_steps: int = 16
    """steps per iteration (``T``): the learner takes ``num_envs × num_steps`` transitions at a time"""
    iterations: int = 3000
    """the most iterations a run takes (it stops early once solved): 192k env steps"""
    learning_rate: float = 1e-3
    """Adam step size"""
    buffer_size: int = 50_000
    """transitions the replay buffer keeps (the oldest are overwritten)"""
    gamma: float = 0.99
    """discount"""
    target_network_frequency: int = 500
    """env steps between copies of the Q-network into the target network"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """ε at the start"""
    end_e: float = 0.05
    """ε after ``exploration_steps``"""
    exploration_steps: int = 10_000
    """env steps over which ε falls linearly from ``start_e`` to ``end_e``"""
    learning_starts: int = 1_000
    """env steps of random-ish play before the first gradient step"""
    train_frequency: int = 4
    """env steps per gradient step"""
    hidden: int = 64
    """width of both hidden layers"""
    target_return: float = 475.0
    """solved: the mean of the last 20 episode returns reaches this (after a burn-in, see Run.is_solved)"""


cfg = DQNConfig()


# ----------------------------------------------------------------------------- the network
class QNetwork(nn.Module):
    """Observation → one Q-value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_actions)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    """CleanRL's ε: from ``start`` to ``end`` linearly over ``duration`` steps, then ``end``."""
    slope = (end - start) / duration
    return max(slope * t + start, end)


def act(q_network: QNetwork, obs, epsilon: float, rng: np.random.Generator):
    """ε-greedy actions for a batch of observations, in the observations' kind of array.

    The greedy actions come from ``q_network`` on its device (CuPy observations reach a GPU
    network through DLPack, and its actions come back as CuPy); which envs explore, and
    their random actions, are drawn from the host generator ``rng`` — the same draws on
    every device, so a CPU run is what it always was. While evaluated (``wb.evaluating()``:
    ``run.evaluate``) ε is 0: every action is greedy.

    >>> q = QNetwork(obs_dim=4, n_actions=2, hidden=8)
    >>> act(q, np.zeros((3, 4), np.float32), 1.0, np.random.default_rng(0)).shape
    (3,)
    """
    xp = array_module_of(obs)
    with torch.no_grad():
        x = on_device(xp.asarray(obs, dtype=xp.float32), device_of(q_network))
        greedy = like(obs, q_network(x).argmax(dim=1))
    if wb.evaluating():
        return greedy
    explore = rng.random(len(obs)) < epsilon
    random_actions = rng.integers(0, q_network.net[-1].out_features, len(obs))
    if not explore.any():  # most steps once ε is small: nothing to send to the device
        return greedy
    # one small host→device copy: the random action where an env explores, -1 where not
    forced = np.where(explore, random_actions, -1)
    forced = forced if xp is np else xp.asarray(forced)
    return xp.where(forced >= 0, forced, greedy)


# ----------------------------------------------------------------------------- the replay buffer
class ReplayBuffer:
    """A ring of transitions in arrays on a device: NumPy for ``device="cpu"``, CuPy on GPU
    ``K`` for ``"cuda:K"`` (``replica.device``), so a GPU learner's buffer never leaves its
    GPU. It has ``state_dict``/``load_state_dict``, so checkpoints and re-placements carry
    its contents (not just the networks).

    ``add`` writes a whole batch at once (two slices of the ring at most); ``sample`` draws
    the indices from a host ``np.random.Generator`` (the same draws on every device) and
    gathers the rows where the buffer is, as torch tensors on its device.

    >>> rb = ReplayBuffer(3, obs_dim=2)
    >>> rb.add(np.zeros((2, 2)), np.array([0, 1]), np.ones(2), np.ones((2, 2)), np.array([False, True]))
    >>> len(rb), tuple(rb.sample(4, np.random.default_rng(0))["obs"].shape)
    (2, (4, 2))
    >>> rb.add(np.arange(8.0).reshape(4, 2), np.arange(4), np.ones(4), np.ones((4, 2)), np.zeros(4, bool))
    >>> rb.action.tolist(), rb.pos, len(rb)    # 4 more from pos 2 wrap around: the last 3 stay
    ([1, 2, 3], 0, 3)
    """

    _ARRAYS = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, capacity: int, obs_dim: int, device: str = "cpu") -> None:
        xp = get_xp(device)  # "cuda:K" also makes GPU K current, so the arrays land there
        self.capacity, self.pos, self.size = capacity, 0, 0
        self.obs = xp.zeros((capacity, obs_dim), np.float32)
        self.next_obs = xp.zeros((capacity, obs_dim), np.float32)
        self.action = xp.zeros(capacity, np.int64)
        self.reward = xp.zeros(capacity, np.float32)
        self.terminated = xp.zeros(capacity, np.float32)

    @property
    def xp(self):
        """The array module the transitions live in (``numpy`` or ``cupy``)."""
        return array_module_of(self.obs)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated) -> None:
        """Add a batch of transitions (leading axis: one per transition; NumPy or CuPy).

        The batch goes in order from ``pos``, wrapping around the end; of a batch longer
        than the capacity only the last ``capacity`` transitions stay, where writing them
        one by one would have left them."""
        n = len(action)
        keep = min(n, self.capacity)
        start = (self.pos + n - keep) % self.capacity  # where the first kept transition lands
        first = min(keep, self.capacity - start)  # how many fit before the end
        for name, values in zip(self._ARRAYS, (obs, action, reward, next_obs, terminated)):
            ring, values = getattr(self, name), _on(self.xp, values)[n - keep :]
            ring[start : start + first] = values[:first]
            ring[: keep - first] = values[first:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement, as tensors on the
        buffer's device."""
        idx = rng.integers(0, self.size, batch_size)
        idx = idx if self.xp is np else self.xp.asarray(idx)  # one small host→device copy
        return {name: to_torch(getattr(self, name)[idx]) for name in self._ARRAYS}

    def state_dict(self) -> dict:
        return {
            "pos": self.pos,
            "size": self.size,
            "obs": self.obs,
            "next_obs": self.next_obs,
            "action": self.action,
            "reward": self.reward,
            "terminated": self.terminated,
        }

    def load_state_dict(self, state: dict) -> None:
        xp = self.xp  # the saved arrays go where this buffer is, whichever device saved them
        for name, value in state.items():
            setattr(
                self,
                name,
                xp.array(_on(xp, value), dtype=getattr(self, name).dtype)
                if name not in ("pos", "size")
                else int(value),
            )


def _on(xp, values):
    """``values`` (NumPy or CuPy) as an array of module ``xp``: a copy only across devices."""
    if xp is np:
        return values.get() if type(values).__module__.startswith("cupy") else np.asarray(values)
    return xp.asarray(values)


# ----------------------------------------------------------------------------- the update
def dqn_update(q_network, target_network, optimizer, batches: list[dict], cfg) -> dict:
    """One gradient step of the TD loss per batch (from ``ReplayBuffer.sample``);
    CleanRL-named losses of the last. Batches from a buffer on another device (a buffer
    fragment placed apart) are moved to the network's."""
    device = device_of(q_network)
    loss = q_values = None
    for data in batches:
        data = {name: tensor.to(device) for name, tensor in data.items()}  # no copy where it is
        with torch.no_grad():
            target_max = target_network(data["next_obs"]).max(dim=1).values
            td_target = data["reward"] + cfg.gamma * target_max * (1 - data["terminated"])
        q_values = q_network(data["obs"]).gather(1, data["action"].view(-1, 1)).squeeze(1)
        loss = nn.functional.mse_loss(td_target, q_values)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if loss is None:
        return {}
    return {"losses/td_loss": loss.item(), "losses/q_values": q_values.mean().item()}


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body). The notebook holds them verbatim.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment env --init",
        """\
envs = wb.envs.make(cfg.env_id, num_envs=cfg.num_envs // replica.count, seed=cfg.seed + replica.index,
                    device=replica.device)
obs = envs.reset()
""",
    ),
    (
        "%%fragment learner --init",
        """\
torch.manual_seed(cfg.seed)
q_network = QNetwork(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
optimizer = adam(q_network.parameters(), cfg.learning_rate, eps=1e-8, device=replica.device)
target_network = QNetwork(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
target_network.load_state_dict(q_network.state_dict())
rb = ReplayBuffer(cfg.buffer_size, obs_dim=4, device=replica.device)  # on the learner's device
rng = np.random.default_rng(cfg.seed)
target_syncs = 0
weights = q_network.state_dict()
""",
    ),
    (
        "%%fragment actor --init",
        """\
explore = np.random.default_rng(cfg.seed + 1000 + replica.index)
policy = QNetwork(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
policy.load_state_dict(weights)
""",
    ),
    (
        "%%fragment actor",
        """\
epsilon = linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_steps, wb.env_steps())
state = obs                        # what this step acts on, kept for the learner
action = act(policy, obs, epsilon, explore)
""",
    ),
    (
        "%%fragment env",
        """\
obs, reward, terminated, truncated, info = envs.step(action)
# a truncated episode's real next observation (obs already holds the reset one)
next_obs = envs.xp.where(truncated[:, None], info["final_obs"], obs)
wb.log("charts/episodic_return", info["episode_return"])
""",
    ),
    (
        "%%fragment learner",
        """\
rb.add(state.reshape(-1, 4), action.reshape(-1), reward.reshape(-1), next_obs.reshape(-1, 4),
       terminated.reshape(-1))
before, after = wb.env_steps(), wb.env_steps() + reward.size
if after > cfg.learning_starts:
    batches = [rb.sample(cfg.batch_size, rng) for _ in range(reward.size // cfg.train_frequency)]
    losses = dqn_update(q_network, target_network, optimizer, batches, cfg)
    for name, number in losses.items():
        wb.log(name, number)
if after // cfg.target_network_frequency > before // cfg.target_network_frequency:
    target_network.load_state_dict(q_network.state_dict())
    target_syncs += 1
wb.log("charts/epsilon", linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_steps, after))
weights = q_network.state_dict()
""",
    ),
    (
        "%%fragment actor --every iteration",
        """\
policy.load_state_dict(weights)
""",
    ),
]


# The other way to hold the buffer: as its own fragment. It takes each iteration's
# transitions (gathered from every env replica) and hands the learner its sampled batches;
# with no step cell, presets place it beside the learner, and a Policy can give it a worker
# of its own (docs/off_policy.md compares the traffic). These cells replace the learner's.
BUFFER_FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment buffer --init",
        """\
rb = ReplayBuffer(cfg.buffer_size, obs_dim=4, device=replica.device)
rng = np.random.default_rng(cfg.seed)
""",
    ),
    (
        "%%fragment buffer --every iteration",
        """\
rb.add(state.reshape(-1, 4), action.reshape(-1), reward.reshape(-1), next_obs.reshape(-1, 4),
       terminated.reshape(-1))
learning = wb.env_steps() + reward.size > cfg.learning_starts
batches = [rb.sample(cfg.batch_size, rng) for _ in range(reward.size // cfg.train_frequency)] if learning else []
taken = reward.size
""",
    ),
    (
        "%%fragment learner --init",
        """\
torch.manual_seed(cfg.seed)
q_network = QNetwork(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
optimizer = adam(q_network.parameters(), cfg.learning_rate, eps=1e-8, device=replica.device)
target_network = QNetwork(obs_dim=4, n_actions=2, hidden=cfg.hidden).to(replica.device)
target_network.load_state_dict(q_network.state_dict())
target_syncs = 0
weights = q_network.state_dict()
""",
    ),
    (
        "%%fragment learner",
        """\
before, after = wb.env_steps(), wb.env_steps() + taken
losses = dqn_update(q_network, target_network, optimizer, batches, cfg)
for name, number in losses.items():
    wb.log(name, number)
if after // cfg.target_network_frequency > before // cfg.target_network_frequency:
    target_network.load_state_dict(q_network.state_dict())
    target_syncs += 1
wb.log("charts/epsilon", linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_steps, after))
weights = q_network.state_dict()
""",
    ),
]


def build_fdg(namespace: dict | None = None, *, buffer: str = "learner"):
    """The DQN FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``QNetwork`` and the rest come from here). ``buffer="fragment"``
    holds the replay buffer in a fragment of its own (:data:`BUFFER_FRAGMENT_CELLS`)."""
    if buffer not in ("learner", "fragment"):
        raise ValueError(f"buffer must be 'learner' or 'fragment', not {buffer!r}")
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    cells = FRAGMENT_CELLS
    if buffer == "fragment":
        cells = [c for c in FRAGMENT_CELLS if not c[0].startswith("%%fragment learner")] + BUFFER_FRAGMENT_CELLS
    for line, body in cells:
        fdg.add_cell(line, body)
    return fdg
