"""MAPPO on simple_spread_v3 (3 agents): does it learn? Trained vs uniform-random team return.

For each seed, runs the MAPPO FDG (``workbench.algorithms.mappo``, the same cells as
``notebooks/mappo.ipynb``) under the inline policy for ``cfg.iterations`` iterations, and a
uniform-random policy on the same env (same ``num_envs`` and seed) for ``--random-episodes``
episodes per env. The return is the env's ``episode_return``: the sum over an episode's 25
steps of the mean-over-agents reward (higher is better, 0 is the unreachable ceiling).

    python -m benchmarks bench_mappo                     # seeds 1 2 3, the default config
    python -m benchmarks bench_mappo --seeds 1 --iterations 100

Trained = the mean of the last 20 episode returns (``run.mean_return()``); the table also
gives the mean over the last iteration's episodes (``num_envs`` of them: less noisy).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import harness


def random_mean_return(env_id: str, num_envs: int, seed: int, episodes_per_env: int) -> float:
    """Mean team return of uniform-random moves, over ``num_envs × episodes_per_env`` episodes."""
    import workbench as wb

    envs = wb.envs.make(env_id, num_envs=num_envs, seed=seed)
    envs.reset()
    rng = np.random.default_rng(seed)
    agents = envs.observation_shape[0]
    returns: list[float] = []
    while len(returns) < num_envs * episodes_per_env:
        *_, info = envs.step(rng.integers(0, 5, size=(num_envs, agents)))
        returns.extend(np.asarray(info["episode_return"]).tolist())
    return float(np.mean(returns))


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--iterations", type=int, default=None, help="iterations per run (default: MAPPOConfig.iterations)"
    )
    parser.add_argument("--random-episodes", type=int, default=20, help="episodes per env for the random baseline")
    args = parser.parse_args()

    from workbench.algorithms import mappo

    mappo.build_fdg().run(iterations=1, steps=4, progress=False)  # warm imports, untimed
    rows = []
    for seed in args.seeds:
        cfg = mappo.MAPPOConfig(seed=seed)
        if args.iterations is not None:
            cfg.iterations = args.iterations
        rand = random_mean_return(cfg.env_id, cfg.num_envs, seed, args.random_episodes)
        fdg = mappo.build_fdg({**vars(mappo), "cfg": cfg})
        started = time.perf_counter()
        run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, progress=False)
        wall = time.perf_counter() - started
        last_batch = float(np.mean(run.episode_returns[-cfg.num_envs :]))
        rows.append((seed, rand, run.mean_return(), last_batch, run.env_steps, wall))

    print(
        f"MAPPO simple_spread_v3, inline, {cfg.num_envs} envs × {cfg.num_steps} steps × "
        f"{cfg.iterations} iterations, random baseline {args.random_episodes} episodes/env\n"
    )
    print(
        "| seed | random mean return | trained mean return (last 20) "
        "| trained (last iteration's episodes) | env steps | wall time (s) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for seed, rand, trained, last_batch, steps, wall in rows:
        print(f"| {seed} | {rand:.2f} | {trained:.2f} | {last_batch:.2f} | {steps:,} | {wall:.1f} |")


if __name__ == "__main__":
    main()
