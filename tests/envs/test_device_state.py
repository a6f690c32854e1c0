"""Array envs' state handling on the CuPy code path, run on the CPU: the env is given an
array module that is NOT numpy (so every ``xp is not np`` branch runs) but computes with
NumPy, and whose own random module must never be used (the stream lives on the host).
Also: out-of-range CartPole actions are refused, as gymnasium refuses them."""

from __future__ import annotations

import copy
import pickle
import types

import numpy as np
import pytest

from workbench.envs import CartPole, SimpleSpread


class _NoDeviceRandom:
    def __getattr__(self, name):
        raise AssertionError(f"the env drew from the device's random module (xp.random.{name})")


def device_like_numpy() -> types.ModuleType:
    """A stand-in for ``cupy``: NumPy's functions under another module object."""
    xp = types.ModuleType("fake_cupy")
    xp.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    xp.random = _NoDeviceRandom()
    return xp


ENVS = {
    "cartpole": lambda xp, seed: CartPole(6, seed=seed, xp=xp),
    "simple_spread": lambda xp, seed: SimpleSpread(6, seed=seed, xp=xp),
    "simple_spread_counter": lambda xp, seed: SimpleSpread(6, seed=seed, xp=xp, resets="counter"),
}


def stream(env):
    """What carries an env's random stream: its host Generator, or (counter resets) its
    episode counters."""
    return env._episodes if counter_resets(env) else env._rng


def counter_resets(env) -> bool:
    return getattr(env, "_resets", None) == "counter"


def actions_for(env, step: int):
    if isinstance(env, CartPole):
        return np.arange(env.num_envs) % 2
    return (np.arange(env.num_envs * env.num_agents).reshape(env.num_envs, -1) + step) % 5


def run(env, steps: int):
    out = []
    for t in range(steps):
        obs, reward, terminated, truncated, info = env.step(actions_for(env, t))
        out.append((obs.copy(), reward.copy(), np.array(info["episode_length"])))
    return out


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


@pytest.mark.parametrize("name", ENVS)
def test_reset_states_match_across_backends(name):
    host, device = ENVS[name](np, 3), ENVS[name](device_like_numpy(), 3)
    assert np.array_equal(host.reset(), device.reset())
    # autoresets too (CartPole ends episodes within ~60 steps; SimpleSpread every 25)
    assert same(run(host, 70), run(device, 70))


@pytest.mark.parametrize("name", ENVS)
def test_the_device_path_state_is_deep_copyable_picklable_and_not_shared(name):
    env = ENVS[name](device_like_numpy(), 5)
    env.reset()
    run(env, 7)
    saved = env.state_dict()
    assert counter_resets(env) or isinstance(saved["_rng"], np.random.Generator)

    twin = copy.deepcopy(env)
    assert stream(twin) is not stream(env)
    assert same(run(twin, 40), run(env, 40))

    env.load_state_dict(saved)
    other = ENVS[name](device_like_numpy(), 9)
    other.reset()
    other.load_state_dict(saved)  # one dict loaded twice: two streams, equal, not one shared
    assert stream(other) is not stream(env)
    assert stream(other) is not saved["_episodes" if counter_resets(env) else "_rng"]
    assert same(run(other, 40), run(env, 40))

    restored = pickle.loads(pickle.dumps(env))  # a module does not pickle: saved by name
    assert restored.xp is np  # "fake_cupy" is no GPU module: it comes back on NumPy
    assert same(run(restored, 30), run(env, 30))


@pytest.mark.parametrize("name", ENVS)
def test_a_device_env_checkpoints_portably(name):
    from workbench.runtime.state.portable import encode_state, restore_into

    env = ENVS[name](device_like_numpy(), 4)
    env.reset()
    run(env, 5)
    saved, skipped = encode_state({"envs": env})
    assert skipped == []  # before: a CuPy env's generator made the whole env unsaveable
    fresh = ENVS[name](device_like_numpy(), 99)
    fresh.reset()
    restore_into({"envs": fresh}, saved)
    assert same(run(fresh, 30), run(env, 30))


def test_state_from_a_device_env_loads_into_a_numpy_env():
    device = CartPole(3, seed=1, xp=device_like_numpy())
    device.reset()
    host = CartPole(3, seed=2)
    host.reset()
    host.load_state_dict(device.state_dict())
    assert same(run(host, 20), run(device, 20))


@pytest.mark.parametrize("bad", [7, -1, 2])
def test_cartpole_refuses_out_of_range_actions(bad):
    env = CartPole(4, seed=0)
    env.reset()
    before = env.state
    with pytest.raises(ValueError, match=rf"actions must be 0 \(push left\) or 1 \(push right\).*e\.g\. {bad}"):
        env.step(np.array([0, 1, bad, 1]))
    assert np.array_equal(env.state, before)  # refused before anything moved


def test_cartpole_takes_bool_actions_and_in_range_ints():
    env = CartPole(2, seed=0)
    env.reset()
    env.step(np.array([True, False]))
    env.step(np.array([1, 0], dtype=np.uint8))


def test_gymnasium_refuses_the_same_action():
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    env.reset(seed=0)
    with pytest.raises(AssertionError):
        env.step(7)


def test_make_takes_a_replica_device_as_backend():
    from workbench.envs import make
    from workbench.kernels import gpu_available

    assert make("CartPole-v1", 2, backend="cpu").xp is np
    if not gpu_available():
        with pytest.raises(RuntimeError, match="none is usable"):
            make("CartPole-v1", 2, backend="cuda:1")
    with pytest.raises(ValueError, match="'cuda:K'"):
        make("CartPole-v1", 2, backend="tpu")
