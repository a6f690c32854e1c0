"""DQN's ReplayBuffer: the vectorised ring write leaves exactly what the one-transition-at-a-
time loop it replaced left (wrap-around, a batch longer than the capacity), sampling draws the
same rows from the same generator, and its state round-trips. The CuPy buffer against this
one: tests/gpu/test_algorithms_on_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.algorithms.dqn import ReplayBuffer

ARRAYS = ("obs", "action", "reward", "next_obs", "terminated")


def loop_add(rb: ReplayBuffer, obs, action, reward, next_obs, terminated) -> None:
    """The reference: ``ReplayBuffer.add`` as it was, one transition at a time."""
    for i in range(len(action)):
        p = rb.pos
        rb.obs[p], rb.action[p], rb.reward[p] = obs[i], action[i], reward[i]
        rb.next_obs[p], rb.terminated[p] = next_obs[i], terminated[i]
        rb.pos = (p + 1) % rb.capacity
    rb.size = min(rb.size + len(action), rb.capacity)


def transitions(n: int, rng: np.random.Generator, obs_dim: int = 3) -> tuple:
    """``n`` transitions as the learner cell hands them over (float64 obs are cast on write)."""
    return (
        rng.normal(size=(n, obs_dim)),
        rng.integers(0, 5, n),
        rng.normal(size=n).astype(np.float32),
        rng.normal(size=(n, obs_dim)).astype(np.float32),
        rng.random(n) < 0.3,
    )


def assert_same(rb: ReplayBuffer, reference: ReplayBuffer) -> None:
    assert (rb.pos, rb.size) == (reference.pos, reference.size)
    for name in ARRAYS:
        mine, theirs = getattr(rb, name), getattr(reference, name)
        assert mine.dtype == theirs.dtype, name
        np.testing.assert_array_equal(mine, theirs, err_msg=name)


@pytest.mark.parametrize(
    "batches",
    [
        [3, 4],  # fills part way, then crosses the end
        [7, 7, 7, 7],  # a batch the capacity's size, from every offset
        [2, 19],  # longer than the capacity: its last 7 stay, ending at (2 + 19) % 7
        [5, 30, 1, 14],  # longer than the capacity from an offset, then exactly twice it
        [0, 6, 0, 1],  # empty batches change nothing
    ],
)
def test_the_ring_write_leaves_what_the_loop_left(batches):
    rng = np.random.default_rng(sum(batches))
    rb, reference = ReplayBuffer(7, obs_dim=3), ReplayBuffer(7, obs_dim=3)
    for n in batches:
        batch = transitions(n, rng)
        rb.add(*batch)
        loop_add(reference, *batch)
        assert_same(rb, reference)


def test_random_batch_sizes_against_the_loop():
    rng = np.random.default_rng(0)
    rb, reference = ReplayBuffer(50, obs_dim=4), ReplayBuffer(50, obs_dim=4)
    for n in rng.integers(0, 130, 40):
        batch = transitions(int(n), rng, obs_dim=4)
        rb.add(*batch)
        loop_add(reference, *batch)
    assert_same(rb, reference)


def test_sample_draws_the_rows_the_generator_picks():
    rb = ReplayBuffer(20, obs_dim=3)
    rb.add(*transitions(13, np.random.default_rng(1)))
    batch = rb.sample(32, np.random.default_rng(7))
    idx = np.random.default_rng(7).integers(0, 13, 32)  # the draw sample makes, as it always did
    for name in ARRAYS:
        expected = torch.as_tensor(getattr(rb, name)[idx])
        assert batch[name].dtype == expected.dtype and torch.equal(batch[name], expected), name


def test_state_round_trips_into_a_fresh_buffer():
    rb = ReplayBuffer(9, obs_dim=3)
    rb.add(*transitions(13, np.random.default_rng(2)))
    fresh = ReplayBuffer(9, obs_dim=3)
    fresh.load_state_dict(rb.state_dict())
    assert_same(fresh, rb)
    assert fresh.xp is np and fresh.obs is not rb.obs  # its own copy
