"""Quickstart PPO on CartPole-v1: time to solve and env-steps/s, inline vs SingleLearnerCoarse.

Runs the quickstart's FDG (``workbench.algorithms.ppo``, the same cells as the notebook)
for several seeds under each placement, in one process, interleaving placements so machine
noise hits both alike. The embedded 2-worker LocalCluster is started (and warmed up)
before any timing: times are "after the cluster is up" and include deploying replicas.

    python -m benchmarks bench_quickstart              # 5 seeds, both placements
    python -m benchmarks bench_quickstart --seeds 1 2  # quicker

Solved = mean of the last 20 episode returns ≥ 475.
"""

from __future__ import annotations

import statistics
import time

from benchmarks import harness


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--policies", nargs="+", default=["inline", "coarse"])
    args = parser.parse_args()

    from workbench.algorithms import ppo
    from workbench.cluster.connect import embedded_cluster

    handle = embedded_cluster(quiet=True)
    # the workers were warmed up with the cluster; warm this process alike (imports such as
    # torch._dynamo on the first optimizer) so inline's first seed is not charged for them
    ppo.build_fdg().run(iterations=1, steps=4, progress=False)
    results: dict[str, list[dict]] = {p: [] for p in args.policies}
    for seed in args.seeds:
        for policy in args.policies:
            cfg = ppo.PPOConfig(seed=seed)
            fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
            started = time.perf_counter()
            run = fdg.run(
                iterations=cfg.iterations,
                steps=cfg.num_steps,
                policy=policy,
                cluster=handle.client,
                target_return=cfg.target_return,
                progress=False,
            )
            call = time.perf_counter() - started
            solved = run.solved_at
            results[policy].append(
                {
                    "seed": seed,
                    "solved": solved is not None,
                    "time": solved["time_s"] if solved else float("nan"),
                    "steps": solved["env_steps"] if solved else run.env_steps,
                    "sps": run.steps_per_second,
                    "call": call,
                }
            )
            print(
                f"  {policy:7s} seed {seed}: {'solved' if solved else 'NOT solved'} in "
                f"{results[policy][-1]['time']:.2f} s, {results[policy][-1]['steps']:,} env steps, "
                f"{run.steps_per_second:,.0f} env-steps/s (call {call:.2f} s)",
                flush=True,
            )

    print("\n| placement | solved | median time to solve (s) | median env steps | median env-steps/s |")
    print("|---|---|---|---|---|")
    medians = {}
    for policy, rows in results.items():
        solved = [r for r in rows if r["solved"]]
        med_time = statistics.median(r["time"] for r in solved) if solved else float("nan")
        med_steps = statistics.median(r["steps"] for r in solved) if solved else float("nan")
        medians[policy] = statistics.median(r["sps"] for r in rows)
        print(f"| {policy} | {len(solved)}/{len(rows)} | {med_time:.2f} | {med_steps:,.0f} | {medians[policy]:,.0f} |")
    if "inline" in medians and "coarse" in medians:
        print(f"\ncoarse / inline env-steps/s: {medians['coarse'] / medians['inline']:.2f}×")


if __name__ == "__main__":
    main()
