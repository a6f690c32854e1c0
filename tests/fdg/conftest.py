"""Shared builders for the pure-core (workbench.fdg) tests: no cluster, no IPython, no torch.

``ppo_fdg`` mirrors the shape of ``workbench.algorithms.ppo.FRAGMENT_CELLS`` (env init/step,
actor init/step/iteration, learner init/iteration) with the heavy calls replaced by names the
notebook would define (``make``, ``Net``, ``train``…), listed in ``NOTEBOOK_NAMES``.
"""

from __future__ import annotations

import pytest

from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory, WorkerInfo

#: (fragment, rate, code) in the order the PPO notebook registers its cells.
PPO_CELLS: list[tuple[str, str, str]] = [
    (
        "env",
        "init",
        "envs = make(cfg.env_id, num_envs=cfg.num_envs // replica.count)\n"
        "obs = envs.reset()\n"
        "done = zeros(envs.num_envs)\n",
    ),
    ("learner", "init", "agent = Net(cfg)\nupdate = 0\nweights = agent.state_dict()\n"),
    ("actor", "init", "policy = Net(cfg)\npolicy.load_state_dict(weights)\n"),
    ("actor", "step", "state, starts = obs, done\naction, logp, value = policy.act(obs)\n"),
    ("env", "step", "obs, reward, terminated, truncated, info = envs.step(action)\ndone = terminated | truncated\n"),
    (
        "learner",
        "iteration",
        "losses = train(agent, update, state, action, logp, value, reward, starts,\n"
        "               last_obs=obs[-1], last_done=done[-1])\n"
        "for name, number in losses.items():\n"
        "    log(name, number)\n"
        "update += 1\n"
        "weights = agent.state_dict()\n",
    ),
    ("actor", "iteration", "policy.load_state_dict(weights)\n"),
]

#: Names the cells read that no fragment writes: the notebook defines them.
NOTEBOOK_NAMES = ("make", "cfg", "zeros", "Net", "train", "log")

#: Per-step names actor+env hand the learner, stacked [T, …].
STACKED = {
    ("actor", "state"),
    ("actor", "action"),
    ("actor", "logp"),
    ("actor", "value"),
    ("actor", "starts"),
    ("env", "reward"),
    ("env", "obs"),
    ("env", "done"),
}


def build_ppo_fdg(cells=PPO_CELLS) -> Graph:
    fdg = Graph()
    for name, rate, code in cells:
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def make_inventory(n: int, *, gpu_at: int | None = None) -> Inventory:
    return Inventory(
        tuple(WorkerInfo(f"tcp://10.0.0.{i}:4000", f"w{i}", nthreads=2, gpus=1 if i == gpu_at else 0) for i in range(n))
    )


@pytest.fixture
def ppo_fdg() -> Graph:
    return build_ppo_fdg()


@pytest.fixture
def notebook_ns() -> dict:
    return {name: object() for name in NOTEBOOK_NAMES}


@pytest.fixture
def inventory():
    """Factory: ``inventory(3, gpu_at=2)``."""
    return make_inventory
