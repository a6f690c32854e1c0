"""Every distribution policy on the same quickstart cells, and scaling past the cores.

Part 1 (``--presets``): the quickstart PPO under each preset on a 2-worker LocalCluster:
steady env-steps/s (first iterations left out), bytes on the wire per iteration, and wall
time to solve CartPole-v1 (mean of the last 20 returns ≥ 475), one run each.

Part 2 (``--scaling``): an environment whose step waits 2 ms without using the CPU (a
remote simulator or game server), 16 envs per replica, under SingleLearnerCoarse and
SingleLearnerFine on 1, 2, 4, 8, 16 and 32 single-thread workers (weak scaling: one env
replica per worker; ``--sizes`` to choose). Efficiency = throughput(W) / (W × throughput(1)).
A size or policy that fails shows its error in the table; the rest still run.

    python benchmarks/bench_policies.py             # both parts
    python benchmarks/bench_policies.py --presets   # part 1 only
"""
from __future__ import annotations

import argparse
import logging
import statistics

#: workers per step of the scaling part (their envs wait, they do not compute: a 2-core box holds 32)
SIZES = (1, 2, 4, 8, 16, 32)

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
    ("learner", "init"): "threshold = 0.0",
    # the actors act with the learner's latest value, as with weights: no replica can run
    # more than an iteration ahead of the learner (a decoupled loop would run ahead of the
    # driver's rows, and a rate taken from them would exceed what the envs can give)
    ("actor", "step"): "action = (obs[:, 2] > threshold).astype(np.int64)",
    ("env", "step"): "time.sleep(0.002)  # a remote simulator answering\n"
                     "obs, reward, terminated, truncated, info = envs.step(action)",
    ("learner", "iteration"): "total = float(reward.sum())\nthreshold = 0.0 * total",
}


def sleepy_fdg():
    import time

    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"wb": wb, "np": np, "time": time})
    for (name, rate), code in SLEEPY.items():
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def scaling(sizes: tuple[int, ...] = SIZES) -> None:
    """Weak scaling of the latency-bound env; a size or policy that fails is reported in
    the table (its error's first line), and the others still run."""
    from distributed import Client, LocalCluster

    import workbench as wb

    results: dict[str, dict[int, float | str]] = {"SingleLearnerCoarse": {}, "SingleLearnerFine": {}}
    #: median seconds per iteration: what grows with the worker count is the driver's and
    #: the scheduler's overhead (each worker's work per iteration is the same)
    per_iteration: dict[str, dict[int, float]] = {"SingleLearnerCoarse": {}, "SingleLearnerFine": {}}
    for workers in sizes:
        with LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(workers, timeout=300)
            for name, policy in (("SingleLearnerCoarse", wb.SingleLearnerCoarse(actors=workers)),
                                 ("SingleLearnerFine", wb.SingleLearnerFine(envs=workers))):
                try:
                    rates, seconds = [], []
                    for _ in range(3):
                        run = sleepy_fdg().run(iterations=12, steps=32, policy=policy, cluster=client,
                                               progress=False)
                        rates.append(steady(run, skip=2)[0])
                        times = [r["time_s"] for r in run.rows[2:]]
                        seconds += [b - a for a, b in zip(times, times[1:])]
                    results[name][workers] = statistics.median(rates)
                    per_iteration[name][workers] = statistics.median(seconds)
                    print(f"  {name} × {workers} workers: {results[name][workers]:,.0f} env-steps/s", flush=True)
                except Exception as exc:  # noqa: BLE001  (the table must still be printed)
                    results[name][workers] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
                    print(f"  {name} × {workers} workers: {results[name][workers]}", flush=True)
    print(_table(results, sizes))
    print(_overhead_table(per_iteration, sizes))


def _table(results: dict[str, dict[int, float | str]], sizes: tuple[int, ...]) -> str:
    """The scaling table: env-steps/s per size, and efficiency at the largest size that ran."""
    head = " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in sizes)
    lines = [f"\n| policy | {head} | efficiency |", "|---|" + "---|" * (len(sizes) + 1)]
    for name, by_workers in results.items():
        cells = " | ".join(f"{v:,.0f}" if isinstance(v, float) else str(v or "—")
                           for v in (by_workers.get(w) for w in sizes))
        ran = [w for w in sizes if isinstance(by_workers.get(w), float)]
        base = by_workers.get(1) if isinstance(by_workers.get(1), float) else None
        top = max(ran) if ran else None
        efficiency = f"{by_workers[top] / (top * base):.0%} at {top}" if base and top else "—"
        lines.append(f"| {name} | {cells} | {efficiency} |")
    return "\n".join(lines)


def _overhead_table(per_iteration: dict[str, dict[int, float]], sizes: tuple[int, ...]) -> str:
    """Median ms per iteration by size, and how much more than at the smallest size: each
    worker's own work per iteration is the same, so the growth is the driver's, the
    scheduler's and the channels' overhead as workers are added."""
    head = " | ".join(f"{w}" for w in sizes)
    lines = [f"\n| ms per iteration (growth over {sizes[0]} worker) | {head} |", "|---|" + "---|" * len(sizes)]
    for name, by in per_iteration.items():
        base = by.get(sizes[0])
        cells = " | ".join(f"{by[w] * 1e3:.1f} (+{(by[w] - base) * 1e3:.1f})" if w in by and base is not None
                           else (f"{by[w] * 1e3:.1f}" if w in by else "—") for w in sizes)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", action="store_true", help="part 1 only")
    parser.add_argument("--scaling", action="store_true", help="part 2 only")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="workers per scaling step (default: %(default)s)")
    args = parser.parse_args()
    both = not (args.presets or args.scaling)
    if args.presets or both:
        from workbench.cluster.connect import embedded_cluster

        presets(embedded_cluster(quiet=True).client)
    if args.scaling or both:
        scaling(tuple(args.sizes))


if __name__ == "__main__":
    main()
