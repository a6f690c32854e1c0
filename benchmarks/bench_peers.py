"""Workbench vs its peers (Stable-Baselines3, CleanRL), whole processes, interleaved seed by seed.

Two comparisons, each run as separate processes exactly as a user starts them, one seed at
a time with every contender run for that seed before the next seed starts (the order
rotates from seed to seed), so machine noise hits all of them alike and the goals are
judged on ratios measured within one run:

(a) time to solve CartPole-v1 from the command line
    ``workbench run notebooks/quickstart.ipynb --set cfg.seed=K [--policy coarse]`` vs
    SB3's PPO with the rl-zoo tuned hyperparameters for CartPole-v1 (8 envs, n_steps 32,
    batch 256, gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0, lr lin 1e-3, clip lin
    0.2; 1e5 steps at most), stopped by a callback once the mean of the last 20 episode
    returns is ≥ 475. Training time: workbench's own summary line (``solved … after X s``,
    timed from the start of the run, after the cluster is up); SB3's from before its envs
    and model are made until the callback stops it. Whole process: the wall time of the
    subprocess, start to exit, measured here for both.

(b) env-steps/s at CleanRL's ``ppo.py`` hyperparameters (4 envs × 128 steps, 4 minibatches
    × 4 epochs, lr 2.5e-4 annealed, ent 0.01, 100 iterations = 51,200 env steps): the
    quickstart's FDG (``workbench.algorithms.ppo.build_fdg`` with a modified ``PPOConfig``)
    inline and coarse, each in a fresh process, vs ``python ppo.py --total-timesteps 51200
    --num-envs 4 --num-steps 128``. Both from after setup: CleanRL's last ``SPS:`` line (env
    steps / time since its loop started, after its envs, network and optimizer were built)
    and workbench's env steps / time from the end of its first iteration (deploy, the init
    cells and iteration 1 excluded; ``run.steps_per_second``, over the whole run, is printed
    beside it).

This script installs nothing. The peers, when you want them (neither is a dependency):

    pip install stable-baselines3                  # SB3 (the rl-zoo settings are inlined here)
    pip install tyro tensorboard                    # what CleanRL's ppo.py imports
    curl -LO https://raw.githubusercontent.com/vwxyzjn/cleanrl/master/cleanrl/ppo.py
    python -m benchmarks bench_peers --cleanrl ppo.py            # 10 seeds
    python -m benchmarks bench_peers --cleanrl ppo.py --seeds 3 --only throughput

A peer that is not available is skipped with a line saying so; its ratios read "n/a".
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT

QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
MARK = "BENCH_PEERS "  # a child's one JSON result line

# CleanRL ppo.py's defaults for CartPole-v1, and the budget of (b)
CLEANRL = dict(
    num_envs=4,
    num_steps=128,
    num_minibatches=4,
    update_epochs=4,
    learning_rate=2.5e-4,
    anneal_lr=True,
    ent_coef=0.01,
    gamma=0.99,
    gae_lambda=0.95,
    clip_coef=0.2,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
CLEANRL_ITERATIONS = 100  # 100 × 4 × 128 = 51,200 env steps

# rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1
ZOO = dict(
    n_envs=8,
    n_timesteps=100_000,
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,
    clip_range=0.2,
)

GOALS = {  # issue 29: (what, contender) -> the ratio (peer's median / workbench's) to reach
    ("solve", "inline"): 4.0,
    ("solve", "coarse"): 4.0,  # training time ≤ 0.25× SB3's
    ("process", "inline"): 2.0,
    ("process", "coarse"): 2.0,  # whole process ≤ 0.5× SB3's
    ("steps", "inline"): 1.0,
    ("steps", "coarse"): 1.0,  # env steps to solve ≤ SB3's
    ("sps", "inline"): 3.0,
    ("sps", "coarse"): 3.0,  # ≥ 3× CleanRL's env-steps/s
}

SOLVED_RE = re.compile(r"solved \(≥ [\d.]+\) at iteration (\d+) after ([\d.]+) s, ([\d,]+) env steps")
STEPS_RE = re.compile(r"([\d,]+) env steps in ([\d.]+) s \(([\d,]+) env-steps/s\)")


# ============================================================================ children
def child_sb3(seed: int) -> dict:
    """SB3 rl-zoo PPO on CartPole-v1 until the mean of the last 20 episodes ≥ 475."""
    from collections import deque

    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    returns: deque = deque(maxlen=20)
    result: dict = {"solved": False}

    class StopWhenSolved(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # the Monitor make_vec_env wraps each env in
                    returns.append(info["episode"]["r"])
            if len(returns) == returns.maxlen and sum(returns) / len(returns) >= 475:
                result.update(solved=True, time_s=time.perf_counter() - started, env_steps=self.num_timesteps)
                return False
            return True

    started = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=ZOO["n_envs"], seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=ZOO["n_steps"],
        batch_size=ZOO["batch_size"],
        gae_lambda=ZOO["gae_lambda"],
        gamma=ZOO["gamma"],
        n_epochs=ZOO["n_epochs"],
        ent_coef=ZOO["ent_coef"],
        learning_rate=linear(ZOO["learning_rate"]),
        clip_range=linear(ZOO["clip_range"]),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=ZOO["n_timesteps"], callback=StopWhenSolved())
    if not result["solved"]:
        result.update(time_s=time.perf_counter() - started, env_steps=model.num_timesteps)
    return result


def child_wb_throughput(policy: str, seed: int) -> dict:
    """The quickstart FDG at CleanRL's hyperparameters, 100 iterations, no early stop."""
    from workbench.algorithms import ppo

    cfg = ppo.PPOConfig(seed=seed, iterations=CLEANRL_ITERATIONS, **CLEANRL)
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, policy=policy, progress=False)
    # like CleanRL's SPS, whose clock starts after its envs, network and optimizer are built
    loop = harness.clock_rate(run)
    return {"sps": loop, "run_sps": run.steps_per_second, "env_steps": run.env_steps, "time_s": run.wall_time}


# ============================================================================ the parent
PEER_ENV: dict[str, str] = {}  # what the peers' processes get on top of os.environ (--peer-threads)


def spawn(cmd: list[str], timeout: float, cwd: str | None = None, peer: bool = False) -> tuple[str, float, int]:
    """``harness.spawn``, a peer's process with the peers' threads (``PEER_ENV``)."""
    return harness.spawn(cmd, timeout, cwd, harness.child_env(**(PEER_ENV if peer else {})))


def child_result(out: str) -> dict | None:
    return harness.read_result(out, MARK)


def child_command(*args: str) -> list[str]:
    """This benchmark as a child process (``--child …``)."""
    return harness.module_command("benchmarks.bench_peers", *args)


def workbench_cmd() -> list[str]:
    exe = shutil.which("workbench")
    return (
        [exe]
        if exe
        else [sys.executable, "-c", "import sys; from workbench.cli import console_main; sys.exit(console_main())"]
    )


def fail(name: str, out: str, rc: int) -> None:
    tail = "\n    ".join(out.strip().splitlines()[-6:])
    print(f"  {name}: FAILED (exit {rc}); last lines:\n    {tail}", flush=True)


def run_solve(contender: str, seed: int, timeout: float, tmp: str) -> dict | None:
    if contender == "sb3":
        out, wall, rc = spawn(child_command("--child", "sb3", "--seed", str(seed)), timeout, tmp, peer=True)
        res = child_result(out)
        if res is None:
            return fail(f"sb3 seed {seed}", out, rc)
        return {**res, "process_s": wall}
    cmd = workbench_cmd() + ["run", str(QUICKSTART), "--set", f"cfg.seed={seed}", "--no-progress"]
    if contender == "coarse":
        cmd += ["--policy", "coarse"]
    out, wall, rc = spawn(cmd, timeout, tmp)
    solved, steps = SOLVED_RE.search(out), STEPS_RE.search(out)
    if rc != 0 or steps is None:
        return fail(f"workbench {contender} seed {seed}", out, rc)
    if solved:
        return {
            "solved": True,
            "time_s": float(solved.group(2)),
            "env_steps": int(solved.group(3).replace(",", "")),
            "process_s": wall,
        }
    return {
        "solved": False,
        "time_s": float(steps.group(2)),
        "env_steps": int(steps.group(1).replace(",", "")),
        "process_s": wall,
    }


def run_throughput(contender: str, seed: int, timeout: float, tmp: str, cleanrl: str | None) -> dict | None:
    if contender == "cleanrl":
        steps = CLEANRL_ITERATIONS * CLEANRL["num_envs"] * CLEANRL["num_steps"]
        out, wall, rc = spawn(
            [
                sys.executable,
                cleanrl,
                "--seed",
                str(seed),
                "--total-timesteps",
                str(steps),
                "--num-envs",
                str(CLEANRL["num_envs"]),
                "--num-steps",
                str(CLEANRL["num_steps"]),
            ],
            timeout,
            tmp,
            peer=True,
        )  # its runs/ (TensorBoard) go under tmp
        sps = re.findall(r"^SPS: (\d+)", out, re.M)
        if rc != 0 or not sps:
            return fail(f"cleanrl seed {seed}", out, rc)
        return {"sps": float(sps[-1]), "env_steps": steps, "process_s": wall}
    out, wall, rc = spawn(
        child_command("--child", "throughput", "--policy", contender, "--seed", str(seed)), timeout, tmp
    )
    res = child_result(out)
    if res is None:
        return fail(f"workbench {contender} throughput seed {seed}", out, rc)
    return {**res, "process_s": wall}


def verdict(ratio: float, goal: float) -> str:
    if not math.isfinite(ratio) or ratio != ratio:
        return "n/a"
    return f"{ratio:.2f}× (goal ≥ {goal:g}×: {'met' if ratio >= goal else 'NOT met'})"


def main() -> None:
    parser = harness.parser(__doc__, json_output=True)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N (default 10)")
    parser.add_argument("--cleanrl", metavar="PATH", help="CleanRL's cleanrl/ppo.py (see above)")
    parser.add_argument("--policies", nargs="+", default=["inline", "coarse"])
    parser.add_argument("--only", choices=["solve", "throughput"], help="run one comparison only")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per process (default 900)")
    parser.add_argument(
        "--peer-threads",
        type=int,
        default=1,
        metavar="N",
        help="torch threads for SB3 and CleanRL (OMP_NUM_THREADS; default 1, as "
        "workbench runs its small networks; 0 = torch's default, all cores)",
    )
    parser.add_argument("--child", choices=["sb3", "throughput"], help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "sb3":
        harness.print_result(child_sb3(args.seed), MARK)
        return
    if args.child == "throughput":
        harness.print_result(child_wb_throughput(args.policy, args.seed), MARK)
        return

    if args.peer_threads > 0:
        PEER_ENV.update(OMP_NUM_THREADS=str(args.peer_threads), MKL_NUM_THREADS=str(args.peer_threads))
    have_sb3 = importlib.util.find_spec("stable_baselines3") is not None
    cleanrl = None
    if args.cleanrl:
        missing = [m for m in ("tyro", "gymnasium", "torch") if importlib.util.find_spec(m) is None]
        if not Path(args.cleanrl).is_file():
            print(f"CleanRL: skipped — {args.cleanrl} is not a file")
        elif missing:
            print(f"CleanRL: skipped — ppo.py needs {', '.join(missing)} (pip install {' '.join(missing)})")
        else:
            cleanrl = str(Path(args.cleanrl).resolve())
    else:
        print(
            "CleanRL: skipped — pass --cleanrl PATH to CleanRL's cleanrl/ppo.py "
            "(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo.py; needs tyro, tensorboard)"
        )
    if not have_sb3:
        print("SB3: skipped — stable_baselines3 is not importable (pip install stable-baselines3)")

    do_solve = args.only in (None, "solve")
    do_thr = args.only in (None, "throughput")
    solve_who = list(args.policies) + (["sb3"] if have_sb3 else [])
    thr_who = list(args.policies) + (["cleanrl"] if cleanrl else [])
    solve: dict[str, list[dict]] = {c: [] for c in solve_who}
    thr: dict[str, list[dict]] = {c: [] for c in thr_who}
    seeds = list(range(1, args.seeds + 1))
    peers = ([("SB3", have_sb3)] if do_solve else []) + ([("CleanRL", cleanrl)] if do_thr else [])
    print(
        f"seeds {seeds}; workbench {'+'.join(args.policies)}; peers: "
        f"{', '.join(name for name, there in peers if there) or 'none'} "
        f"(peers' torch threads: {args.peer_threads or 'default'})",
        flush=True,
    )

    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        for i, seed in enumerate(seeds):
            if do_solve:
                for who in harness.rotated(solve_who, i):
                    r = run_solve(who, seed, args.timeout, tmp)
                    if r is None:
                        continue
                    solve[who].append({"seed": seed, **r})
                    print(
                        f"  solve  {who:7s} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} "
                        f"after {r['time_s']:.2f} s, {r['env_steps']:,} env steps; "
                        f"process {r['process_s']:.1f} s",
                        flush=True,
                    )
            if do_thr:
                for who in harness.rotated(thr_who, i):
                    r = run_throughput(who, seed, args.timeout, tmp, cleanrl)
                    if r is None:
                        continue
                    thr[who].append({"seed": seed, **r})
                    print(
                        f"  thrpt  {who:7s} seed {seed}: {r['sps']:,.0f} env-steps/s (process {r['process_s']:.1f} s)",
                        flush=True,
                    )
    total = time.perf_counter() - begun

    import platform

    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M %Z')}; {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}; "
        f"{len(seeds)} seeds interleaved, {total / 60:.1f} min in all"
    )

    if do_solve:
        print("\n(a) CartPole-v1 from the command line — median (min–max) over seeds\n")
        print("| | solved | training time to solve (s) | whole process (s) | env steps to solve |")
        print("|---|---|---|---|---|")
        m: dict[str, tuple[float, float, float]] = {}
        everyone: dict[str, bool] = {}
        names = {"inline": "workbench inline", "coarse": "workbench coarse", "sb3": "SB3 rl-zoo PPO (8 envs)"}
        for who, rows in solve.items():
            times = [r["time_s"] if r["solved"] else math.inf for r in rows]
            procs = [r["process_s"] for r in rows]
            steps = [r["env_steps"] if r["solved"] else math.inf for r in rows]
            m[who] = (harness.median(times), harness.median(procs), harness.median(steps))
            everyone[who] = bool(rows) and all(r["solved"] for r in rows)
            print(
                f"| {names.get(who, who)} | {sum(r['solved'] for r in rows)}/{len(rows)} | "
                f"{harness.spread(times, '{:.2f}')} | {harness.spread(procs, '{:.1f}')} | "
                f"{harness.spread(steps, '{:,.0f}')} |"
            )
        print()
        for who in args.policies:
            if who not in m:
                continue
            if "sb3" not in m:
                print(f"{who} vs SB3: n/a (SB3 not run)")
                continue
            print(
                f"{who:6s} vs SB3, training time to solve: "
                f"{verdict(m['sb3'][0] / m[who][0], GOALS.get(('solve', who), math.nan))}"
            )
            print(
                f"{who:6s} vs SB3, whole process:          "
                f"{verdict(m['sb3'][1] / m[who][1], GOALS.get(('process', who), math.nan))}"
            )
            print(
                f"{who:6s} vs SB3, env steps to solve:     "
                f"{verdict(m['sb3'][2] / m[who][2], GOALS.get(('steps', who), math.nan))}"
            )
            print(f"{who:6s}: every seed solved: {'yes' if everyone[who] else 'NO'}")

    if do_thr:
        steps = CLEANRL_ITERATIONS * CLEANRL["num_envs"] * CLEANRL["num_steps"]
        print(
            f"\n(b) env-steps/s at CleanRL's ppo.py settings (4 envs × 128 steps, 4×4 minibatch "
            f"epochs, {steps:,} env steps) — median (min–max)\n"
        )
        print("| | env-steps/s (after setup) | over the whole run | whole process (s) |")
        print("|---|---|---|---|")
        names = {"inline": "workbench inline", "coarse": "workbench coarse", "cleanrl": "CleanRL ppo.py"}
        s: dict[str, float] = {}
        for who, rows in thr.items():
            sps = [r["sps"] for r in rows]
            s[who] = harness.median(sps)
            whole = harness.spread([r["run_sps"] for r in rows], "{:,.0f}") if "run_sps" in rows[0] else "(its SPS)"
            print(
                f"| {names.get(who, who)} | {harness.spread(sps, '{:,.0f}')} | {whole} | "
                f"{harness.spread([r['process_s'] for r in rows], '{:.1f}')} |"
            )
        print()
        for who in args.policies:
            if who not in s:
                continue
            if "cleanrl" not in s:
                print(f"{who} vs CleanRL: n/a (CleanRL not run)")
                continue
            print(
                f"{who:6s} vs CleanRL, env-steps/s: {verdict(s[who] / s['cleanrl'], GOALS.get(('sps', who), math.nan))}"
            )
        if "inline" in s and "coarse" in s:
            print(f"coarse / inline env-steps/s at these settings: {s['coarse'] / s['inline']:.2f}×")

    harness.write_json(args.json, {"solve": solve, "throughput": thr, "seeds": seeds})


if __name__ == "__main__":
    main()
