"""PPO's NumPy minibatch step (workbench.algorithms.numpy_update), by mechanism: it takes the
step the torch path takes (same gradients, same clipping, the run's own optimizer), visits
every sample once per epoch, and steps aside for what it does not implement."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from workbench.algorithms import ppo
from workbench.algorithms.numpy_update import NumpyStep


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """As inside a workbench run (the NumPy step needs torch or BLAS on one thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _batch(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n, 4)).astype(np.float32),
        rng.integers(0, 3, n),
        (np.log(rng.uniform(0.2, 0.5, n))).astype(np.float32),
        rng.normal(size=n).astype(np.float32) * 2,
        rng.normal(size=n).astype(np.float32) * 5,
    )


def _pair(cfg, seed=0):
    torch.manual_seed(seed)
    a = ppo.ActorCritic(4, 3, norm_obs=True)
    a.obs_norm.update(torch.from_numpy(_batch(256, seed=9)[0] * 3 + 2))  # statistics far from 0 / 1
    b = copy.deepcopy(a)
    return (a, torch.optim.Adam(a.parameters(), lr=1e-2, eps=1e-5)), (
        b,
        torch.optim.Adam(b.parameters(), lr=1e-2, eps=1e-5),
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"ent_coef": 0.01},
        {"norm_adv": False},
        {"max_grad_norm": 0.05},
        {"max_grad_norm": None, "vf_coef": 1.0},
        {"clip_coef": 0.02},  # most ratios outside the range after one step
    ],
)
def test_steps_are_the_torch_paths(overrides):
    cfg = ppo.PPOConfig(**overrides)
    (ours, opt_ours), (theirs, opt_theirs) = _pair(cfg)
    batch = _batch()
    tensors = tuple(torch.from_numpy(x) for x in batch)
    params = list(theirs.parameters())
    step = NumpyStep.build(ours, opt_ours, cfg)
    assert step is not None
    with torch.no_grad():  # the NumPy step reads observations as the networks do (ppo_update normalises once)
        batch = (ours.normalize(tensors[0]).numpy(), *batch[1:])
    for k in range(4):  # later steps: ratios away from 1, clipping active
        mb = np.random.default_rng(k).permutation(64)[:32]
        got = step(batch, mb)
        want = ppo._minibatch_step(theirs, opt_theirs, cfg, params, tensors, torch.from_numpy(mb))
        np.testing.assert_allclose(got, [float(x) for x in want], rtol=1e-4, atol=1e-6)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def _update_on_a_random_rollout(agent, optimizer, cfg, T: int, N: int, seed: int = 0) -> None:
    """One ``ppo_update`` of CartPole-shaped random data, ``T`` steps of ``N`` envs."""
    rng = np.random.default_rng(seed)
    ppo.ppo_update(
        agent,
        optimizer,
        cfg,
        0,
        rng.normal(size=(T, N, 4)).astype(np.float32),
        rng.integers(0, 2, (T, N)),
        np.full((T, N), -0.69, np.float32),
        np.zeros((T, N), np.float32),
        np.ones((T, N), np.float32),
        np.zeros((T, N), bool),
        np.zeros((N, 4), np.float32),
        np.zeros(N, bool),
    )


def test_ppo_update_runs_it_once_per_minibatch_over_every_sample(monkeypatch):
    cfg = ppo.PPOConfig(num_envs=16, num_steps=8, update_epochs=3, num_minibatches=4)
    agent = ppo.ActorCritic(4, 2, norm_obs=True)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    seen = []
    real = NumpyStep.__call__
    monkeypatch.setattr(NumpyStep, "__call__", lambda self, batch, mb: seen.append(mb.copy()) or real(self, batch, mb))
    monkeypatch.setattr(ppo, "_minibatch_step", lambda *a: pytest.fail("the torch path ran"))
    _update_on_a_random_rollout(agent, optimizer, cfg, T=8, N=16)
    assert len(seen) == 12 and all(len(mb) == 32 for mb in seen)
    for e in range(3):
        assert sorted(np.concatenate(seen[4 * e : 4 * e + 4])) == list(range(128))


def test_what_it_does_not_implement_takes_the_torch_path():
    cfg = ppo.PPOConfig()
    agent = ppo.ActorCritic(4, 2)
    optimizer = torch.optim.Adam(agent.parameters())
    assert NumpyStep.build(agent, optimizer, cfg) is not None
    assert NumpyStep.build(agent, optimizer, ppo.PPOConfig(clip_vloss=True)) is None
    agent.fast_numpy_update = False
    assert NumpyStep.build(agent, optimizer, cfg) is None
    del agent.fast_numpy_update
    handle = agent.critic[1].register_forward_hook(lambda *a: None)
    assert NumpyStep.build(agent, optimizer, cfg) is None
    handle.remove()
    agent.actor[1] = torch.nn.ReLU()
    assert NumpyStep.build(agent, optimizer, cfg) is None


def test_in_a_worker_of_several_threads_its_steps_run_torch_on_one(monkeypatch):
    """A Dask worker with ``--nthreads 2`` gives torch 2 threads (BLAS on one, by the
    nanny): the NumPy steps' optimizer must step with torch on one thread (its pool spun
    beside NumPy: 226 ms an update instead of 13 on a busy 2-core host), and the thread's
    count comes back after the update."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    torch.set_num_threads(2)
    cfg = ppo.PPOConfig(num_envs=8, num_steps=4, update_epochs=2, num_minibatches=2)
    agent = ppo.ActorCritic(4, 2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    threads_at_step = []
    real_step = optimizer.step
    monkeypatch.setattr(optimizer, "step", lambda *a: threads_at_step.append(torch.get_num_threads()) or real_step())
    monkeypatch.setattr(ppo, "_minibatch_step", lambda *a: pytest.fail("the torch path ran"))
    _update_on_a_random_rollout(agent, optimizer, cfg, T=4, N=8, seed=1)
    assert threads_at_step == [1, 1, 1, 1]
    assert torch.get_num_threads() == 2
