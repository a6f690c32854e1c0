"""FusedAdam is torch's fused Adam without torch.optim's compiler import: the same numbers
step for step, the same state_dict both ways, checkpoints through workbench's portable state,
and a PPO learner that never imports torch._dynamo."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from workbench.algorithms.optim import FusedAdam, adam
from workbench.runtime.state.portable import encode_state, restore_into


def _nets(seed: int = 0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    return net, copy.deepcopy(net)


def _step(net, opt, x) -> None:
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    opt.step()


@pytest.mark.parametrize("betas,eps", [((0.9, 0.999), 1e-5), ((0.5, 0.9), 1e-8)])
def test_steps_equal_torch_fused_adam_bit_for_bit_with_a_changing_rate(betas, eps):
    ours_net, theirs_net = _nets()
    ours = FusedAdam(ours_net.parameters(), lr=3e-3, betas=betas, eps=eps)
    theirs = torch.optim.Adam(theirs_net.parameters(), lr=3e-3, betas=betas, eps=eps, fused=True)
    gen = torch.Generator().manual_seed(1)
    for i in range(7):
        for opt in (ours, theirs):  # annealed as ppo_update does it
            opt.param_groups[0]["lr"] = 3e-3 * (1 - i / 7)
        x = torch.randn(9, 5, generator=gen)
        _step(ours_net, ours, x)
        _step(theirs_net, theirs, x)
        for a, b in zip(ours_net.parameters(), theirs_net.parameters()):
            assert torch.equal(a, b), f"step {i}"


def test_two_groups_and_parameters_without_gradients():
    ours_net, theirs_net = _nets()
    groups = lambda n: [{"params": n[0].parameters(), "lr": 1e-2}, {"params": n[2].parameters()}]  # noqa: E731
    ours, theirs = FusedAdam(groups(ours_net), lr=1e-3), torch.optim.Adam(groups(theirs_net), lr=1e-3, fused=True)
    ours_net[2].bias.requires_grad_(False)
    theirs_net[2].bias.requires_grad_(False)
    x = torch.randn(4, 5)
    for _ in range(3):
        _step(ours_net, ours, x)
        _step(theirs_net, theirs, x)
    assert all(torch.equal(a, b) for a, b in zip(ours_net.parameters(), theirs_net.parameters()))
    assert ours_net[2].bias not in ours.state  # never stepped, no state (as torch)
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]


def test_state_dicts_load_into_each_other_and_continue_identically():
    a_net, b_net = _nets()
    ours = FusedAdam(a_net.parameters(), lr=1e-2, eps=1e-5)
    theirs = torch.optim.Adam(b_net.parameters(), lr=1e-2, eps=1e-5, fused=True)
    x = torch.randn(6, 5)
    for _ in range(3):
        _step(a_net, ours, x)
        _step(b_net, theirs, x)
    saved_ours, saved_theirs = copy.deepcopy(ours.state_dict()), copy.deepcopy(theirs.state_dict())
    for k, s in saved_theirs["state"].items():
        assert s.keys() == saved_ours["state"][k].keys()
        assert all(torch.equal(s[n], saved_ours["state"][k][n]) for n in s)
    # cross over: torch's state into FusedAdam, FusedAdam's into torch, then step on
    c_net, d_net = copy.deepcopy(a_net), copy.deepcopy(b_net)
    ours2 = FusedAdam(c_net.parameters(), lr=5.0)
    ours2.load_state_dict(saved_theirs)
    theirs2 = torch.optim.Adam(d_net.parameters(), lr=5.0, fused=True)
    theirs2.load_state_dict(saved_ours)
    assert ours2.param_groups[0]["lr"] == 1e-2
    for _ in range(2):
        _step(c_net, ours2, x)
        _step(d_net, theirs2, x)
    assert all(torch.equal(a, b) for a, b in zip(c_net.parameters(), d_net.parameters()))


def test_a_checkpoint_restores_it_as_an_optimizer():
    net, fresh = _nets()
    opt = FusedAdam(net.parameters(), lr=1e-2)
    _step(net, opt, torch.randn(3, 5))
    enc, _ = encode_state({"opt": opt})
    assert enc["opt"]["__kind__"] == "optimizer"  # isinstance(torch.optim.Optimizer)
    target = FusedAdam(fresh.parameters(), lr=1e-2)  # empty state until its first step
    restore_into({"opt": target}, enc)
    restored = {p: s for p, s in zip(fresh.parameters(), (target.state[p] for p in fresh.parameters()))}
    for p, q in zip(net.parameters(), fresh.parameters()):
        assert torch.equal(opt.state[p]["exp_avg_sq"], restored[q]["exp_avg_sq"])


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="empty parameter list"):
        FusedAdam([])
    with pytest.raises(ValueError, match="lr ≥ 0"):
        FusedAdam(torch.nn.Linear(2, 2).parameters(), lr=-1.0)
    net, other = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = FusedAdam(net.parameters())
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": net.weight})
    small = FusedAdam([other.weight])
    with pytest.raises(ValueError, match="another network"):
        small.load_state_dict(opt.state_dict())


def test_a_rate_schedule_drives_it():
    opt = FusedAdam(torch.nn.Linear(2, 1).parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5**i)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.5


def test_adam_picks_it_on_the_cpu():
    assert isinstance(adam(torch.nn.Linear(2, 1).parameters(), 1e-3), FusedAdam)
    assert isinstance(adam(torch.nn.Linear(2, 1).parameters(), 1e-3, device="cpu"), torch.optim.Optimizer)


def test_a_ppo_learner_never_imports_the_compiler():
    """The mechanism behind the time saved: building the quickstart's learner and running
    PPO updates (NumPy and torch paths) leaves torch._dynamo unimported."""
    code = """
import sys, numpy as np, torch
from workbench.algorithms import ppo
from workbench.algorithms.ppo import ActorCritic, PPOConfig, adam, ppo_update
for fast in (True, False):
    ActorCritic.fast_numpy_update = fast
    cfg = PPOConfig(num_envs=4, num_steps=16)
    agent = ActorCritic(4, 2, norm_obs=True)
    opt = adam(agent.parameters(), cfg.learning_rate, device="cpu")
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(16, 4, 4)).astype(np.float32)
    act, logp, val = (np.stack(x) for x in zip(*(agent.act(o) for o in obs)))
    ppo_update(agent, opt, cfg, 0, obs, act, logp, val, np.ones((16, 4), np.float32),
               np.zeros((16, 4), bool), obs[-1], np.zeros(4, bool))
print("dynamo" if "torch._dynamo" in sys.modules else "clean")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "clean"
