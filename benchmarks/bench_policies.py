"""Every distribution policy on the same quickstart cells, and scaling past the cores.

Part 1 (``--presets``): the quickstart PPO under each preset on a 2-worker LocalCluster:
steady env-steps/s (first iterations left out), bytes on the wire per iteration, and wall
time to solve CartPole-v1 (mean of the last 20 returns ≥ 475), one run each.

Part 2 (``--scaling``): an environment whose step waits 2 ms without using the CPU (a
remote simulator or game server), 16 envs per replica, stepped by 1, 2, 4 and 8 workers
under SingleLearnerCoarse and SingleLearnerFine (weak scaling: one env replica per
worker). Efficiency = throughput(W) / (W × throughput(1)).

    python benchmarks/bench_policies.py             # both parts
    python benchmarks/bench_policies.py --presets   # part 1 only
"""
from __future__ import annotations

import argparse
import logging
import statistics

PRESETS = ["inline", "SingleLearnerCoarse", "SingleLearnerFine", "MultiLearner", "GPUOnly", "Async", "auto"]


def steady(run, skip: int = 5) -> tuple[float, float]:
    """(env-steps/s, median bytes per iteration) leaving out the first ``skip`` iterations."""
    rows = run.rows[skip:] if len(run.rows) > skip + 1 else run.rows
    steps = rows[-1]["env_steps"] - rows[0]["env_steps"]
    seconds = rows[-1]["time_s"] - rows[0]["time_s"]
    return steps / seconds, statistics.median(r["wire/bytes"] for r in rows)


def presets(client) -> None:
    from workbench.algorithms import ppo

    ppo.build_fdg().run(iterations=1, steps=4, progress=False)  # warm this process up
    print("| policy | env-steps/s (steady) | bytes on the wire / iteration | time to solve (s) | env steps |")
    print("|---|---|---|---|---|")
    for policy in PRESETS:
        cfg = ppo.PPOConfig()
        fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
        run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, policy=policy, cluster=client,
                      target_return=cfg.target_return, progress=False)
        rate, wire = steady(run)
        solved = run.solved_at
        print(f"| {run.policy_name} | {rate:,.0f} | {wire:,.0f} | "
              f"{solved['time_s']:.2f} | {solved['env_steps']:,} |" if solved else
              f"| {run.policy_name} | {rate:,.0f} | {wire:,.0f} | not solved | — |", flush=True)


SLEEPY = {
    ("env", "init"): "envs = wb.envs.make('CartPole-v1', num_envs=16, seed=replica.index)\nobs = envs.reset()",
    ("actor", "step"): "action = (obs[:, 2] > 0).astype(np.int64)",
    ("env", "step"): "time.sleep(0.002)  # a remote simulator answering\n"
                     "obs, reward, terminated, truncated, info = envs.step(action)",
    ("learner", "iteration"): "total = float(reward.sum())",
}


def sleepy_fdg():
    import time

    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"wb": wb, "np": np, "time": time})
    for (name, rate), code in SLEEPY.items():
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def scaling() -> None:
    from distributed import Client, LocalCluster

    import workbench as wb

    results: dict[str, dict[int, float]] = {"SingleLearnerCoarse": {}, "SingleLearnerFine": {}}
    for workers in (1, 2, 4, 8):
        with LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            for name, policy in (("SingleLearnerCoarse", wb.SingleLearnerCoarse(actors=workers)),
                                 ("SingleLearnerFine", wb.SingleLearnerFine(envs=workers))):
                rates = []
                for _ in range(3):
                    run = sleepy_fdg().run(iterations=12, steps=32, policy=policy, cluster=client,
                                           progress=False)
                    rates.append(steady(run, skip=2)[0])
                results[name][workers] = statistics.median(rates)
                print(f"  {name} × {workers} workers: {results[name][workers]:,.0f} env-steps/s", flush=True)
    print("\n| policy | 1 worker | 2 | 4 | 8 | efficiency at 8 |")
    print("|---|---|---|---|---|---|")
    for name, by_workers in results.items():
        base = by_workers[1]
        cells = " | ".join(f"{by_workers[w]:,.0f}" for w in (1, 2, 4, 8))
        print(f"| {name} | {cells} | {by_workers[8] / (8 * base):.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", action="store_true", help="part 1 only")
    parser.add_argument("--scaling", action="store_true", help="part 2 only")
    args = parser.parse_args()
    both = not (args.presets or args.scaling)
    if args.presets or both:
        from workbench.cluster.connect import embedded_cluster

        presets(embedded_cluster(quiet=True).client)
    if args.scaling or both:
        scaling()


if __name__ == "__main__":
    main()
