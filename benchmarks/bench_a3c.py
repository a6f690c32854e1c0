"""A3C on CartPole-v1 under the Async policy (and inline for reference), several seeds.

Each actor+env replica computes gradients on its own rollouts; the learner applies each as
it arrives and answers that replica alone with fresh weights — no barrier. Solved = mean of
the last 20 episode returns ≥ 475. Runs on the embedded 2-worker LocalCluster.

    python -m benchmarks bench_a3c                 # seeds 1 2 3, Async and inline
"""

from __future__ import annotations

from benchmarks import harness


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--policies", nargs="+", default=["Async", "inline"])
    args = parser.parse_args()

    from workbench.algorithms import a3c
    from workbench.cluster.connect import embedded_cluster

    client = embedded_cluster(quiet=True).client
    print("| policy | seed | solved | time to solve (s) | env steps | iterations |")
    print("|---|---|---|---|---|---|")
    for policy in args.policies:
        for seed in args.seeds:
            cfg = a3c.A3CConfig(seed=seed)
            fdg = a3c.build_fdg({**vars(a3c), "cfg": cfg})
            run = fdg.run(
                iterations=cfg.iterations,
                steps=cfg.num_steps,
                policy=policy,
                cluster=client,
                target_return=cfg.target_return,
                progress=False,
            )
            solved = run.solved_at
            if solved:
                print(
                    f"| {run.policy_name} | {seed} | yes | {solved['time_s']:.2f} | {solved['env_steps']:,} | "
                    f"{solved['iteration'] + 1} |",
                    flush=True,
                )
            else:
                print(
                    f"| {run.policy_name} | {seed} | no | — | {run.env_steps:,} | {run.completed_iterations} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
