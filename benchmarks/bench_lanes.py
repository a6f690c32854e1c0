"""Lanes in a training run: continuous PPO on EnvPool's HalfCheetah-v5, acting overlapped
with stepping or not, side by side.

    python -m benchmarks bench_lanes                       # N = 8 32 64 envs, 3 repeats
    python -m benchmarks bench_lanes --sizes 8 --repeats 1 --iterations 3

Three placements of the same FDG (`workbench.algorithms.ppo_continuous`, CleanRL's
hyperparameters, a batch of 2,048 env steps an iteration: N envs × 2048/N steps), all in
this one process, EnvPool with one C++ thread a pool:

- **one replica**: the ``inline`` policy, one actor+env replica stepping all N envs (act on N,
  step N, act on N…): what a run does today;
- **two replicas, threads**: two actor+env replicas of N/2 envs in this process, in two
  threads taking turns with the random generators (``lanes=False``);
- **two replicas, lanes**: the same two replicas stepped as lanes of one thread
  (``lanes=True``): while one replica's envs step in EnvPool's thread, the other acts.

Printed per N: env-steps/s over the run after its first iteration, and the rollout's
milliseconds per iteration (the iteration's wall time less the learner's compute), median of
the repeats (the placements of a repeat run one after another, their order rotating). The
three give the same numbers, seed for seed (tests/envs/test_envpool_lanes.py); only the time
differs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from benchmarks import harness

PLACEMENTS = ("one replica", "two replicas, threads", "two replicas, lanes")


def measure(placement: str, num_envs: int, iterations: int, seed: int) -> tuple[float, float]:
    """(env-steps/s after iteration 1, rollout ms per iteration) of one run."""
    from workbench.algorithms import ppo_continuous
    from workbench.fdg.policy import Group, Policy
    from workbench.fdg.vocabulary import IN_PROCESS

    cfg = dataclasses.replace(
        ppo_continuous.cfg,
        env_id="HalfCheetah-v5",
        env_backend="envpool",
        seed=seed,
        num_envs=num_envs,
        num_steps=2048 // num_envs,
        iterations=iterations,
    )
    fdg = ppo_continuous.build_fdg({**vars(ppo_continuous), "cfg": cfg})
    policy: object = "inline"
    if placement != "one replica":
        acting = fdg.schedule().step_order
        policy = Policy(
            "two actors in one process",
            (
                Group(acting, 2, (IN_PROCESS, IN_PROCESS)),
                Group(tuple(n for n in fdg.fragments if n not in acting), 1, (IN_PROCESS,)),
            ),
        )
    run = fdg.run(
        iterations=iterations,
        steps=cfg.num_steps,
        policy=policy,
        progress=False,
        lanes=placement.endswith("lanes"),
        keep_state=False,
    )
    rows = run.rows
    rate = (rows[-1]["env_steps"] - rows[0]["env_steps"]) / (rows[-1]["time_s"] - rows[0]["time_s"])
    rollout = [b["time_s"] - a["time_s"] - b["time/learner_compute_s"] for a, b in zip(rows, rows[1:])]
    return rate, 1000 * statistics.median(rollout)


def main() -> None:
    parser = harness.parser(__doc__, repeats=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 64], help="N, envs in all")
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    print(
        f"### HalfCheetah-v5, continuous PPO, 2,048 env steps an iteration, {args.iterations} iterations "
        f"(median of {args.repeats})\n"
    )
    print("| N | " + " | ".join(f"{p}: env-steps/s · rollout ms" for p in PLACEMENTS) + " |")
    print("|---:|" + "---:|" * len(PLACEMENTS))
    for n in args.sizes:
        got: dict[str, list[tuple[float, float]]] = {p: [] for p in PLACEMENTS}
        for r in range(args.repeats):
            for p in PLACEMENTS[r % 3 :] + PLACEMENTS[: r % 3]:
                got[p].append(measure(p, n, args.iterations, seed=1 + r))
        cells = []
        for p in PLACEMENTS:
            rate = statistics.median(g[0] for g in got[p])
            rollout = statistics.median(g[1] for g in got[p])
            cells.append(f"{rate:,.0f} · {rollout:.0f}")
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
