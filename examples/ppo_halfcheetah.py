"""Train continuous-action PPO on MuJoCo HalfCheetah-v5 with workbench fragments.

The cells are ``workbench.algorithms.ppo_continuous.FRAGMENT_CELLS`` (CleanRL's
``ppo_continuous_action.py`` as fragments): the env fragment steps a pool of HalfCheetah envs
(EnvPool's C++ pool where EnvPool is installed, else gymnasium's; ``--env-backend``) with
``--threads`` threads and keeps the observation/reward normalisers, the
actor samples from a Gaussian policy, the learner runs the PPO update each iteration. One
iteration is ``num_envs × num_steps`` = 8 × 256 = 2048 env steps (CleanRL's batch), so
``--iterations 50`` is about 100k env steps; CleanRL's 1M-step budget is ``--iterations 488``.

    python examples/ppo_halfcheetah.py                        # 50 iterations, inline
    python examples/ppo_halfcheetah.py --iterations 100 --threads 2
    python examples/ppo_halfcheetah.py --policy coarse        # env+actor on 2 Dask workers
    python examples/ppo_halfcheetah.py --env-backend gymnasium   # gymnasium's envs, not EnvPool's

Needs MuJoCo: ``pip install "mujoco>=3" "gymnasium[mujoco]"``. Prints the mean episode return
at the start and at the end (a random policy scores about -300; CleanRL's script mostly ends at
~1,400-1,600 after 1M steps, workbench's defaults, which start the policy at a smaller action
std, at ~4,600-5,600: docs/envpool.md), a short learning curve, and the throughput.

``benchmarks/bench_continuous.py`` runs it against CleanRL's script at CleanRL's settings (see
docs/envpool.md). Measured earlier, before EnvPool, the fused learner and the log-std default of
-1 (the numbers below are of CleanRL's std of 1), on the 2-core dev
machine (shared, torch 2.13 CPU, MuJoCo 4.0, seed 1, gymnasium's envs), inline:
``--iterations 150`` (307k env steps) took 115 s at ~2,700 env-steps/s; the mean return went
from -302 (first 8 episodes) to 1117 (last 20); curve -284 (32k steps), 37 (96k), 602 (161k),
940 (225k), 1123 (305k). ``--threads 2`` gives the identical run (threaded pools are seeded as
one) but slower: ~2,300-2,500 env-steps/s, the env cell 0.6-0.75x as fast, since two threads
on two shared cores lose more to GIL hand-offs than MuJoCo's GIL-free stepping gains. The
learner's update (320 minibatch steps per iteration) is ~70% of the time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from workbench.algorithms import ppo_continuous

POLICIES = {"inline": "inline", "coarse": "SingleLearnerCoarse"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--iterations", type=int, default=50, help="iterations of 8 envs x 256 steps (default 50, about 100k env steps)"
    )
    parser.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        default="inline",
        help="inline: everything in this process; coarse: env+actor replicated "
        "over an embedded 2-worker Dask cluster, one learner",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=ppo_continuous.cfg.threads,
        help="threads stepping each env replica's pool of envs (default %(default)s)",
    )
    parser.add_argument(
        "--env-backend",
        default=ppo_continuous.cfg.env_backend,
        choices=["auto", "envpool", "gymnasium"],
        help="auto: EnvPool where installed and it has the id (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=ppo_continuous.cfg.seed)
    parser.add_argument(
        "--env-id",
        default=ppo_continuous.cfg.env_id,
        help="any gymnasium id with a Box action space (default %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def steady_rate(rows: list[dict], skip: int = 1) -> float:
    """env-steps/s leaving out the first ``skip`` iterations (deploy, warm-up)."""
    rows = rows[skip:] if len(rows) > skip + 1 else rows
    if len(rows) < 2:
        return 0.0
    return (rows[-1]["env_steps"] - rows[0]["env_steps"]) / (rows[-1]["time_s"] - rows[0]["time_s"])


def curve(run, points: int = 8) -> list[tuple[int, float]]:
    """(env steps, mean episode return of the episodes that ended in that stretch) at about
    ``points`` evenly spaced stretches of the run."""
    rows = [r for r in run.rows if "charts/episodic_return" in r]
    if not rows:
        return []
    size = max(1, len(rows) // points)
    out = []
    for i in range(0, len(rows), size):
        chunk = rows[i : i + size]
        out.append((chunk[-1]["env_steps"], statistics.fmean(r["charts/episodic_return"] for r in chunk)))
    return out


def summary(run, cfg) -> str:
    """The run's summary: returns at the start and at the end, throughput, the curve."""
    returns = run.episode_returns
    first = returns[: cfg.num_envs]  # the first episode of every env (HalfCheetah: 1000 steps each)
    last = returns[-20:]
    lines = [run.summary()]
    if first:
        lines.append(f"mean episode return: start {statistics.fmean(first):8.1f}  (first {len(first)} episodes)")
        lines.append(
            f"                     end   {statistics.fmean(last):8.1f}  (last {len(last)} episodes, "
            f"{len(returns)} in all)"
        )
    else:
        lines.append("no episode ended: run more iterations (a HalfCheetah episode is 1000 steps)")
    lines.append(
        f"throughput: {steady_rate(run.rows):,.0f} env-steps/s steady "
        f"(first iteration left out), {run.steps_per_second:,.0f} overall"
    )
    compute = (
        {
            k.removeprefix("time/").removesuffix("_compute_s"): sum(r.get(k, 0.0) for r in run.rows)
            for k in run.rows[-1]
            if k.endswith("_compute_s")
        }
        if run.rows
        else {}
    )
    if compute:
        lines.append(
            "compute seconds per fragment: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in compute.items())
        )
    if curve(run):
        lines.append(
            "learning curve (env steps: mean return): "
            + ", ".join(f"{steps // 1000}k: {ret:.0f}" for steps, ret in curve(run))
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    cfg = dataclasses.replace(
        ppo_continuous.cfg,
        env_id=args.env_id,
        seed=args.seed,
        threads=args.threads,
        iterations=args.iterations,
        env_backend=args.env_backend,
    )  # lr anneals over the run
    fdg = ppo_continuous.build_fdg({**vars(ppo_continuous), "cfg": cfg})
    print(
        f"PPO ({cfg.env_id}): {args.iterations} iterations x {cfg.num_envs} envs x {cfg.num_steps} "
        f"steps = {args.iterations * cfg.num_envs * cfg.num_steps:,} env steps, policy {args.policy}, "
        f"{cfg.threads} env thread(s), env backend {cfg.env_backend}",
        flush=True,
    )
    run = fdg.run(
        iterations=args.iterations, steps=cfg.num_steps, policy=POLICIES[args.policy], progress=not args.no_progress
    )
    print(summary(run, cfg))
    return run


if __name__ == "__main__":
    main()
