"""A tiny torch-holding FDG whose returns depend on a notebook config (lr, seed), and a
fresh run store per test."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

import workbench as wb


@dataclass
class ToyConfig:
    lr: float = 0.1
    seed: int = 0


#: an env that finishes an episode every 3 steps with a return that grows with cfg.lr; its
#: "weights" are a tensor, so the run's final checkpoint holds one
INIT = "rng = np.random.default_rng(cfg.seed)\nw = torch.zeros(3)\nt = 0\n"
STEP = (
    "t += 1\nw += cfg.lr\nwb.count_env_steps(2)\n"
    "if t % 3 == 0:\n    wb.log('charts/episodic_return', float(rng.normal()) + cfg.lr * t)\n"
)


def toy_fdg(lr: float = 0.1, seed: int = 0, *, step: str = STEP) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb, "cfg": ToyConfig(lr, seed)})
    fdg.add_fragment("env", INIT, rate="init")
    fdg.add_fragment("env", step, rate="step")
    return fdg


@pytest.fixture
def store(tmp_path):
    return tmp_path / "runs"
