"""Env-steps per second: array CartPole vs gymnasium's SyncVectorEnv (and threads on MuJoCo).

    python -m benchmarks bench_envs            # N in 1, 16, 256, 1024, 4096; median of 5
    python -m benchmarks bench_envs --quick    # fewer steps and repeats, smaller N
    python -m benchmarks bench_envs --mujoco   # also HalfCheetah-v5, 1 vs 2 threads
    python -m benchmarks bench_envs --spread   # also MPE simple_spread_v3 (array env vs mpe2)
    python -m benchmarks bench_envs --pools    # CartPole-v1 and HalfCheetah-v5: EnvPool (sync,
                                               # async) vs SyncVectorEnv vs threads vs NumPy

``--pools`` measures every backend of one env id in one table, the backends of a row one
after another (rotating which goes first), so a busy machine's noise hits them alike.
EnvPool sync is `workbench.envs.EnvPoolVectorEnv` (send all N, recv all N, same-step
autoreset); EnvPool async is EnvPool's own loop, ``batch_size = N/2``: each ``recv`` returns
the first half of the envs to finish and the next ``send`` acts for exactly those, so the C++
threads step one half while Python handles the other (next-step autoreset, EnvPool's).

Every number is env-steps/s (N x steps / wall time) of the step loop alone,
actions drawn beforehand; the median of the repeats is reported.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from workbench.envs import CartPole, SimpleSpread, ThreadedVectorEnv

from benchmarks import harness

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
        rate = median_rate(lambda: ThreadedVectorEnv(factory, num_envs, threads=threads, seed=0), actions, repeats)
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


def envpool_async_rate(env_id: str, num_envs: int, actions: np.ndarray, repeats: int, threads: int) -> float:
    """env-steps/s of EnvPool's asynchronous loop: ``batch_size = N/2``, recv a batch, send
    that batch's actions; ``actions`` is ``[steps, N/2, ...]``."""
    import envpool

    batch = max(1, num_envs // 2)
    pool = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch, seed=0, num_threads=threads)
    rates = []
    for _ in range(repeats):
        pool.async_reset()
        start = time.perf_counter()
        for a in actions:
            *_, info = pool.recv()
            pool.send(a, info["env_id"])
        for _ in range(num_envs // batch):  # every env still in flight: each sent action stepped,
            pool.recv()  # and none left running into the next async_reset
        rates.append(actions.shape[0] * actions.shape[1] / (time.perf_counter() - start))
    pool.close()
    return statistics.median(rates)


def bench_pools(env_id: str, sizes: list[int], repeats: int, budget: int, threads: int) -> None:
    """Every backend of ``env_id`` side by side, env-steps/s (median of ``repeats``)."""
    from workbench.envs import EnvPoolVectorEnv, make
    from workbench.envs.envpool_env import envpool_has

    rng = np.random.default_rng(0)
    space = gymnasium.make(env_id).action_space

    def draw(steps: int, n: int) -> np.ndarray:
        if isinstance(space, gymnasium.spaces.Discrete):
            return rng.integers(0, space.n, size=(steps, n))
        return rng.uniform(-1, 1, size=(steps, n, *space.shape)).astype(np.float32)

    backends: dict[str, Callable[[int], object] | None] = {
        "SyncVectorEnv": lambda n: SyncVectorEnv(
            [lambda: gymnasium.make(env_id)] * n, autoreset_mode=AutoresetMode.SAME_STEP
        ),
        f"threads ({threads})": lambda n: make(env_id, n, seed=0, backend="gymnasium", threads=threads),
        f"EnvPool sync ({threads} thr)": (lambda n: EnvPoolVectorEnv(env_id, n, seed=0, threads=threads))
        if envpool_has(env_id)
        else None,
        f"EnvPool async ({threads} thr)": None,  # its own loop, below
        "NumPy array env": (lambda n: make(env_id, n, seed=0, backend="numpy")) if env_id == "CartPole-v1" else None,
    }
    shown = [
        name
        for name, b in backends.items()
        if b is not None or (name.startswith("EnvPool async") and envpool_has(env_id))
    ]
    print(
        f"\n### {env_id}: env-steps/s by backend (median of {repeats}; {threads} thread(s) where "
        "a backend has threads)\n"
    )
    print("| N | " + " | ".join(shown) + " |")
    print("|---:|" + "---:|" * len(shown))
    for row, n in enumerate(sizes):
        rates: dict[str, str] = {}
        for name in harness.rotated(shown, row):
            per_env_python = name in ("SyncVectorEnv",) or name.startswith("threads")
            steps = steps_for(n, budget if per_env_python else budget * 10)
            if per_env_python and n > SYNC_MAX_ENVS:
                rates[name] = "(skipped)"
            elif name.startswith("EnvPool async"):
                rates[name] = f"{envpool_async_rate(env_id, n, draw(2 * steps, max(1, n // 2)), repeats, threads):,.0f}"
            else:
                rates[name] = f"{median_rate(lambda: backends[name](n), draw(steps, n), repeats):,.0f}"
        print(f"| {n} | " + " | ".join(rates[name] for name in shown) + " |", flush=True)


def main() -> None:
    parser = harness.parser(__doc__, repeats=5, quick=True)
    parser.add_argument("--mujoco", action="store_true", help="also HalfCheetah-v5 threads")
    parser.add_argument("--spread", action="store_true", help="also MPE simple_spread_v3")
    parser.add_argument(
        "--pools", action="store_true", help="CartPole-v1 and HalfCheetah-v5 by backend, EnvPool included"
    )
    parser.add_argument("--threads", type=int, default=2, help="threads of the pools (--pools)")
    args = parser.parse_args()
    repeats = min(args.repeats, 3) if args.quick else args.repeats
    budget = 20_000 if args.quick else 100_000  # env-steps per SyncVectorEnv repeat
    sizes = [1, 16, 256, 1024] if args.quick else [1, 16, 256, 1024, 4096]
    print(f"median of {repeats} repeats; numpy {np.__version__}, gymnasium {gymnasium.__version__}")
    if args.pools:
        bench_pools("CartPole-v1", sizes, repeats, budget, args.threads)
        bench_pools("HalfCheetah-v5", [n for n in sizes if n <= 256], repeats, budget // 10, args.threads)
        return
    bench_cartpole(sizes, repeats, budget)
    if args.mujoco:
        bench_mujoco(num_envs=8, steps=100 if args.quick else 300, repeats=repeats)
    if args.spread:
        bench_spread(sizes + [16384], repeats, budget)


if __name__ == "__main__":
    main()
