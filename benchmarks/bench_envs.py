"""Env-steps per second: array CartPole vs gymnasium's SyncVectorEnv (and threads on MuJoCo).

    python benchmarks/bench_envs.py            # N in 1, 16, 256, 1024, 4096; median of 5
    python benchmarks/bench_envs.py --quick    # fewer steps and repeats, smaller N
    python benchmarks/bench_envs.py --mujoco   # also HalfCheetah-v5, 1 vs 2 threads
    python benchmarks/bench_envs.py --spread   # also MPE simple_spread_v3 (array env vs mpe2)

Every number is env-steps/s (N x steps / wall time) of the step loop alone,
actions drawn beforehand; the median of the repeats is reported.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from workbench.envs import CartPole, SimpleSpread, ThreadedVectorEnv

SYNC_MAX_ENVS = 1024  # the per-env Python loop above this only costs time


def steps_per_second(step: Callable[[np.ndarray], object], actions: np.ndarray) -> float:
    start = time.perf_counter()
    for a in actions:
        step(a)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - start)


def median_rate(make_env: Callable[[], object], actions: np.ndarray, repeats: int) -> float:
    env = make_env()
    env.reset(seed=0)
    rates = [steps_per_second(env.step, actions) for _ in range(repeats)]
    env.close()
    return statistics.median(rates)


def steps_for(num_envs: int, budget: int) -> int:
    """Enough steps that a repeat lasts long enough to time, few enough to finish soon."""
    return int(min(2000, max(20, budget // num_envs)))


def bench_cartpole(sizes: list[int], repeats: int, budget: int) -> None:
    rng = np.random.default_rng(0)
    print("\n### CartPole-v1: workbench array env (NumPy) vs gymnasium SyncVectorEnv\n")
    print("| N | array CartPole (steps/s) | SyncVectorEnv (steps/s) | ratio |")
    print("|---:|---:|---:|---:|")
    for n in sizes:
        array_actions = rng.integers(0, 2, size=(steps_for(n, budget * 50), n))
        array_rate = median_rate(lambda: CartPole(n, seed=0), array_actions, repeats)
        if n <= SYNC_MAX_ENVS:
            sync_actions = rng.integers(0, 2, size=(steps_for(n, budget), n))
            sync_rate = median_rate(
                lambda: SyncVectorEnv(
                    [lambda: gymnasium.make("CartPole-v1")] * n,
                    autoreset_mode=AutoresetMode.SAME_STEP,
                ),
                sync_actions,
                repeats,
            )
            sync_cell, ratio = f"{sync_rate:,.0f}", f"{array_rate / sync_rate:,.1f}x"
        else:
            sync_cell, ratio = "(skipped)", "-"
        print(f"| {n} | {array_rate:,.0f} | {sync_cell} | {ratio} |", flush=True)


def bench_mujoco(num_envs: int, steps: int, repeats: int) -> None:
    try:
        import mujoco  # noqa: F401
    except ImportError:
        print("\n(--mujoco: mujoco is not installed; pip install 'mujoco>=3' 'gymnasium[mujoco]')")
        return
    factory = lambda: gymnasium.make("HalfCheetah-v5")  # noqa: E731
    actions = np.random.default_rng(0).uniform(-1, 1, size=(steps, num_envs, 6)).astype(np.float32)
    print(f"\n### HalfCheetah-v5, {num_envs} envs: ThreadedVectorEnv threads\n")
    print("| threads | steps/s | speed-up |")
    print("|---:|---:|---:|")
    base = None
    for threads in (1, 2):
        rate = median_rate(
            lambda: ThreadedVectorEnv(factory, num_envs, threads=threads, seed=0), actions, repeats
        )
        base = base or rate
        print(f"| {threads} | {rate:,.0f} | {rate / base:.2f}x |", flush=True)


def bench_spread(sizes: list[int], repeats: int, budget: int) -> None:
    """SimpleSpread (3 agents) env-steps/s; one mpe2 parallel_env as the per-env reference."""
    rng = np.random.default_rng(0)
    print("\n### simple_spread_v3 (3 agents): workbench array env (NumPy)\n")
    print("| N | array SimpleSpread (env-steps/s) |")
    print("|---:|---:|")
    for n in sizes:
        actions = rng.integers(0, 5, size=(steps_for(n, budget * 50), n, 3))
        rate = median_rate(lambda: SimpleSpread(n, seed=0), actions, repeats)
        print(f"| {n} | {rate:,.0f} |", flush=True)
    try:
        from mpe2 import simple_spread_v3
    except ImportError:
        print("\n(mpe2 is not installed: no per-env reference; pip install mpe2)")
        return
    penv = simple_spread_v3.parallel_env()
    penv.reset(seed=0)
    steps = 2000
    acts = rng.integers(0, 5, size=(steps, 3))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for a in acts:
            _, _, _, trunc, _ = penv.step(dict(zip(penv.possible_agents, a.tolist())))
            if any(trunc.values()):
                penv.reset()
        rates.append(steps / (time.perf_counter() - start))
    rate = statistics.median(rates)
    print(f"\nmpe2 simple_spread_v3.parallel_env, one env: {rate:,.0f} env-steps/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps/repeats, N up to 1024")
    parser.add_argument("--mujoco", action="store_true", help="also HalfCheetah-v5 threads")
    parser.add_argument("--spread", action="store_true", help="also MPE simple_spread_v3")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    budget = 20_000 if args.quick else 100_000  # env-steps per SyncVectorEnv repeat
    sizes = [1, 16, 256, 1024] if args.quick else [1, 16, 256, 1024, 4096]
    print(f"median of {repeats} repeats; numpy {np.__version__}, gymnasium {gymnasium.__version__}")
    bench_cartpole(sizes, repeats, budget)
    if args.mujoco:
        bench_mujoco(num_envs=8, steps=100 if args.quick else 300, repeats=repeats)
    if args.spread:
        bench_spread(sizes + [16384], repeats, budget)


if __name__ == "__main__":
    main()
