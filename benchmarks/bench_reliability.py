"""What reliability costs: per-iteration snapshots (worker-loss recovery) and checkpoints.

Runs the quickstart PPO under SingleLearnerCoarse on a 2-worker LocalCluster (loopback)
for ``--iterations`` iterations, interleaving snapshot_every=0 (off), 1 (the default on
a cluster) and 1 plus a checkpoint every 10 iterations, ``--rounds`` times, and compares
medians of steady env-steps/s (first iteration left out: deploy). Also times one
checkpoint write and load of the trained state.

    python -m benchmarks bench_reliability                 # 60 iterations, 5 rounds
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time

from benchmarks import harness


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from workbench.algorithms import ppo
    from workbench.runtime.state.checkpoint import load_checkpoint

    cfg = ppo.PPOConfig()
    cases = {
        "snapshots off": {"snapshot_every": 0},
        "snapshots every iteration": {},
        "+ checkpoint every 10": {"checkpoint_every": 10},
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        ppo.build_fdg().run(iterations=3, steps=8, policy="coarse", cluster=client, progress=False)  # warm up
        for round_ in range(args.rounds):
            for name in harness.rotated(list(cases), round_):
                extra = dict(cases[name])
                if "checkpoint_every" in extra:
                    extra["checkpoint_dir"] = tempfile.mkdtemp()
                fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
                run = fdg.run(
                    iterations=args.iterations,
                    steps=cfg.num_steps,
                    policy="coarse",
                    cluster=client,
                    progress=False,
                    **extra,
                )
                results[name].append(harness.clock_rate(run))
                print(f"  round {round_}: {name:<28} {results[name][-1]:10,.0f} env-steps/s", flush=True)
        directory = tempfile.mkdtemp()
        started = time.perf_counter()
        path = run.checkpoint(directory)
        wrote = time.perf_counter() - started
        started = time.perf_counter()
        load_checkpoint(path)
        loaded = time.perf_counter() - started

    base = statistics.median(results["snapshots off"])
    print("\nmedian steady env-steps/s (SingleLearnerCoarse, 2 workers):")
    for name, values in results.items():
        median = statistics.median(values)
        print(
            f"  {name:<28} {median:10,.0f}   {median / base:5.2f}× off   (spread {min(values):,.0f}–{max(values):,.0f})"
        )
    print(f"checkpoint of the quickstart state: write {wrote * 1000:.1f} ms, load {loaded * 1000:.1f} ms")


if __name__ == "__main__":
    main()
