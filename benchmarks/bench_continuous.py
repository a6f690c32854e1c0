"""Continuous PPO on HalfCheetah-v5: workbench vs CleanRL's ``ppo_continuous_action.py``, same run.

Both at CleanRL's settings (1M env steps, batch 2048, 32 minibatches × 10 epochs, lr 3e-4
annealed, γ 0.99, λ 0.95, clip 0.2 with value clipping, observation and reward normalisation,
state-independent log-std, 64-64 tanh MLPs, Adam eps 1e-5, grad norm 0.5). workbench runs
its defaults, which differ in three places: it collects the 2048 with ``--wb-envs`` envs
(default 8 × 256 steps, EnvPool's pool when installed; ``--wb-envs 1`` is CleanRL's 1 × 2048),
bootstraps time limits, and starts the policy at a log-std of −1 (CleanRL's: 0).
``--wb-like-cleanrl``: CleanRL's in every respect (1 × 2048 on gymnasium's env, no bootstrap,
log-std 0); ``--wb-set FIELD=VALUE``: any field of workbench's config, for ablations
(``--jobs 2`` runs them two at a time: a run's return is deterministic per seed). Seeds are
interleaved: for each seed every contender runs, in a fresh process, before the next seed
starts, and the order alternates, so the shared machine's noise hits both alike.

Reported per contender (medians over seeds): the final return (mean of the last 10 finished
episodes' raw returns), the process's wall time start to exit, env-steps/s; and the ratios
the goal is judged on: final return ≥ CleanRL's, wall time ≤ 0.5 × CleanRL's.

CleanRL's script is not part of workbench; download it (and what it imports):

    pip install tyro tensorboard
    curl -LO https://raw.githubusercontent.com/vwxyzjn/cleanrl/master/cleanrl/ppo_continuous_action.py
    python -m benchmarks bench_continuous --cleanrl ppo_continuous_action.py           # 1M, 3 seeds
    python -m benchmarks bench_continuous --cleanrl ppo_continuous_action.py --steps 100000 --seeds 1
    python -m benchmarks bench_continuous --cleanrl ppo_continuous_action.py --seeds 2 --first-seed 4
    python -m benchmarks bench_continuous --seeds 3 --first-seed 11 --jobs 2 --wb-set log_std_init=0.0

CleanRL pins gymnasium 0.29, which has no HalfCheetah-v5; its script runs here unmodified on
gymnasium 1.x through `gymnasium_029_shim` (two API changes of 1.0 undone: the
``TransformObservation`` without an observation space, and the 0.29 ``final_info`` list of
per-env dicts, with 0.29's same-step autoreset). Without ``--cleanrl`` only workbench runs.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from benchmarks import harness

MARK = "BENCH_CONTINUOUS "
ENV_ID = "HalfCheetah-v5"
BATCH = 2048
LAST_EPISODES = 10
THREADS_VAR = "BENCH_CLEANRL_TORCH_THREADS"
RETURN_RE = re.compile(r"episodic_return=\[?(-?[\d.]+(?:e[-+]?\d+)?)")


# ============================================================================ children
def child_workbench(
    seed: int, steps: int, num_envs: int, like_cleanrl: bool = False, overrides: dict | None = None
) -> dict:
    """workbench's continuous PPO FDG, inline, its defaults and CleanRL's budget (with
    ``like_cleanrl`` CleanRL's hyperparameters, env and time-limit rule in every respect;
    ``overrides``: config fields set on top, ``--wb-set``)."""
    import dataclasses

    from workbench.algorithms import ppo_continuous

    iterations = steps // BATCH
    exact = (
        dict(num_envs=1, env_backend="gymnasium", bootstrap_truncated=False, log_std_init=0.0) if like_cleanrl else {}
    )
    cfg = dataclasses.replace(
        ppo_continuous.cfg,
        **{
            "env_id": ENV_ID,
            "seed": seed,
            "num_envs": num_envs,
            "iterations": iterations,
            **exact,
            **(overrides or {}),
        },
    )
    cfg = dataclasses.replace(cfg, num_steps=BATCH // cfg.num_envs)
    fdg = ppo_continuous.build_fdg({**vars(ppo_continuous), "cfg": cfg})
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, progress=False)
    returns = run.episode_returns
    return {
        "final_return": statistics.fmean(returns[-LAST_EPISODES:]) if returns else float("nan"),
        "episodes": len(returns),
        "env_steps": run.env_steps,
        "sps": run.steps_per_second,
    }


def gymnasium_029_shim() -> None:
    """Let a gymnasium-0.29 script (CleanRL's) run on gymnasium 1.x, behaviour unchanged."""
    import gymnasium as gym
    import numpy as np
    from gymnasium.vector import AutoresetMode

    transform = gym.wrappers.TransformObservation

    class TransformObservation(transform):  # 0.29: func only, the space unchanged
        def __init__(self, env, func, observation_space=None):
            super().__init__(env, func, observation_space or env.observation_space)

    class SyncVectorEnv(gym.vector.SyncVectorEnv):
        """0.29's same-step autoreset, ``final_info`` an array of per-env dicts (None where
        the env did not end)."""

        def __init__(self, env_fns, **kwargs):
            super().__init__(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)

        def step(self, actions):
            obs, reward, terminated, truncated, infos = super().step(actions)
            if "final_info" in infos:
                ended = infos["final_info"].get("_episode", terminated | truncated)
                per_env = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(ended):
                    per_env[i] = {"episode": {k: v[i] for k, v in infos["final_info"]["episode"].items()}}
                infos["final_info"] = per_env
            return obs, reward, terminated, truncated, infos

    gym.wrappers.TransformObservation = TransformObservation
    gym.vector.SyncVectorEnv = SyncVectorEnv


def child_cleanrl(script: str, argv: list[str]) -> None:
    gymnasium_029_shim()
    if os.environ.get(THREADS_VAR):  # --cleanrl-threads: as workbench's run does for itself
        import torch

        torch.set_num_threads(int(os.environ[THREADS_VAR]))
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


# ============================================================================ the parent
def run_one(contender: str, seed: int, args: argparse.Namespace, tmp: str) -> dict | None:
    if contender == "cleanrl":
        cmd = [
            *harness.module_command("benchmarks.bench_continuous"),
            "--child-cleanrl",
            os.path.abspath(args.cleanrl),
            "--",
            "--env-id",
            ENV_ID,
            "--seed",
            str(seed),
            "--total-timesteps",
            str(args.steps),
            "--no-cuda",
        ]
    else:
        cmd = (
            [
                *harness.module_command("benchmarks.bench_continuous"),
                "--child-workbench",
                "--seed",
                str(seed),
                "--steps",
                str(args.steps),
                "--wb-envs",
                str(args.wb_envs),
            ]
            + (["--wb-like-cleanrl"] if args.wb_like_cleanrl else [])
            + [arg for assignment in args.wb_set for arg in ("--wb-set", assignment)]
        )
    threads = getattr(args, "cleanrl_threads", None)
    env = {THREADS_VAR: str(threads)} if contender == "cleanrl" and threads else {}
    out, wall, rc = harness.spawn(cmd, args.timeout, tmp, harness.child_env(**env))
    if contender == "cleanrl":
        returns = [float(r) for r in RETURN_RE.findall(out)]
        sps = re.findall(r"^SPS: (\d+)", out, re.M)
        result = (
            {
                "final_return": statistics.fmean(returns[-LAST_EPISODES:]),
                "episodes": len(returns),
                "sps": float(sps[-1]),
            }
            if rc == 0 and returns and sps
            else None
        )
    else:
        result = harness.read_result(out, MARK) if rc == 0 else None
    if result is None:
        tail = "\n    ".join(out.strip().splitlines()[-8:])
        print(f"  {contender} seed {seed}: FAILED (exit {rc}); last lines:\n    {tail}", flush=True)
        return None
    result["wall_s"] = wall
    print(
        f"  seed {seed} {contender:8s}: final return {result['final_return']:8.1f} "
        f"({result['episodes']} episodes), {wall:7.1f} s wall, {result['sps']:,.0f} env-steps/s",
        flush=True,
    )
    return result


def report(results: dict[str, list[dict]], args: argparse.Namespace) -> None:
    med = {
        name: {key: statistics.median(r[key] for r in rows) for key in ("final_return", "wall_s", "sps")}
        for name, rows in results.items()
        if rows
    }
    shape = (
        "like CleanRL: 1 env x 2048 steps, gymnasium's env, no bootstrap, log-std 0"
        if args.wb_like_cleanrl
        else f"{args.wb_envs} envs x {BATCH // args.wb_envs} steps"
    )
    shape += "".join(f", {assignment}" for assignment in args.wb_set)
    print(
        f"\n### HalfCheetah-v5, {args.steps:,} env steps, seeds {args.seeds_list} "
        f"(medians; workbench {shape}; CleanRL torch threads: {args.cleanrl_threads or 'its default'})\n"
    )
    print("| contender | final return | wall time (s) | env-steps/s |")
    print("|---|---:|---:|---:|")
    for name, m in med.items():
        print(f"| {name} | {m['final_return']:.1f} | {m['wall_s']:.1f} | {m['sps']:,.0f} |")
    if "workbench" in med and "cleanrl" in med:
        wb, cl = med["workbench"], med["cleanrl"]
        print(
            f"\nwall time workbench / CleanRL: {wb['wall_s'] / cl['wall_s']:.2f}x (goal ≤ 0.5x); "
            f"env-steps/s {wb['sps'] / cl['sps']:.2f}x; final return {wb['final_return']:.1f} vs "
            f"{cl['final_return']:.1f} (goal ≥)"
        )
        if args.steps < 1_000_000:
            print(
                f"(a SHORT run: {args.steps:,} steps of the 1M the goal is judged on; early returns "
                "say little about final ones)"
            )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child-cleanrl":
        rest = sys.argv[3:]
        return child_cleanrl(sys.argv[2], rest[1:] if rest[:1] == ["--"] else rest)
    parser = harness.parser(__doc__)
    parser.add_argument("--cleanrl", help="path to CleanRL's ppo_continuous_action.py (see above)")
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run (default 1M)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..K (default 3)")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=1,
        metavar="S",
        help="start the seeds at S (S..S+K-1): more seeds beside an earlier run",
    )
    parser.add_argument("--wb-envs", type=int, default=8, help="workbench's envs (2048 / envs steps each)")
    parser.add_argument(
        "--wb-like-cleanrl",
        action="store_true",
        help="workbench in CleanRL's shape in every respect: 1 env x 2048 steps, "
        "gymnasium's HalfCheetah-v5, no time-limit bootstrap",
    )
    parser.add_argument(
        "--wb-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a field of workbench's PPOContinuousConfig for its runs (repeatable), "
        "e.g. log_std_init=0.0: how the ablation in docs/envpool.md was run",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="workbench-only runs (no --cleanrl) this many at a time: the returns are "
        "the same (a run is deterministic per seed), the wall times not comparable",
    )
    parser.add_argument(
        "--cleanrl-threads",
        type=int,
        help="torch threads for CleanRL (default: torch's, one per core; workbench's "
        "run uses 1 for its small networks, and so does CleanRL with 1)",
    )
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per process")
    parser.add_argument("--child-workbench", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if BATCH % args.wb_envs:
        parser.error(f"--wb-envs must divide the batch of {BATCH}")
    from workbench.algorithms.ppo_continuous import PPOContinuousConfig

    overrides = harness.parse_overrides(args.wb_set, PPOContinuousConfig, "--wb-set")
    if args.jobs > 1 and args.cleanrl:
        parser.error(
            "--jobs runs workbench alone (its returns do not depend on timing); "
            "the comparison with --cleanrl runs one process at a time"
        )
    if args.child_workbench:
        harness.print_result(
            child_workbench(args.seed, args.steps, args.wb_envs, args.wb_like_cleanrl, overrides), MARK
        )
        return
    contenders = ["workbench"] + (["cleanrl"] if args.cleanrl else [])
    if not args.cleanrl:
        print("(no --cleanrl: workbench alone; see the module docstring for CleanRL's script)")
    args.seeds_list = list(range(args.first_seed, args.first_seed + args.seeds))
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as tmp:  # CleanRL's runs/ (TensorBoard) land here
        if args.jobs > 1:
            with ThreadPoolExecutor(args.jobs) as pool:
                runs = pool.map(lambda seed: run_one("workbench", seed, args, tmp), args.seeds_list)
                results["workbench"] = [r for r in runs if r]
        for k, seed in enumerate(args.seeds_list if args.jobs == 1 else []):
            for name in harness.rotated(contenders, k):
                result = run_one(name, seed, args, tmp)
                if result:
                    results[name].append(result)
    report(results, args)


if __name__ == "__main__":
    main()
