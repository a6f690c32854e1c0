"""A sweep of 10 seeds of the quickstart against the same seeds run one by one, and against SB3.

Contenders, each a whole wall time measured here from the first process's start to the last
one's exit, all to solve CartPole-v1 (the quickstart's target, 475; SB3 by bench_peers'
callback, the mean of the last 20 episodes ≥ 475):

- ``sweep``: ``workbench sweep notebooks/quickstart.ipynb --seeds N`` — one process, the
  embedded 2-worker cluster, every trial one Dask task under the inline policy;
- ``coarse``: N ``workbench run notebooks/quickstart.ipynb --policy coarse --set cfg.seed=K``
  commands one after another (what a user without sweeps runs);
- ``inline``: the same with ``--policy inline`` (``--inline``);
- ``sb3``: SB3's PPO with rl-zoo's CartPole settings (``bench_peers.child_sb3``), N seeds two
  processes at a time, one torch thread each (``OMP_NUM_THREADS=1``).

With ``--reps R`` the contenders run R times, interleaved (the order rotating), medians
reported. The load average (``uptime``) is printed before and after: other work on the
machine inflates every number, the sweep's (which wants both cores) the most.

    python -m benchmarks.bench_sweep                        # 10 seeds, once
    python -m benchmarks.bench_sweep --reps 3 --inline      # a quiet machine's table
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.bench_peers import PEER_ENV, QUICKSTART, child_command, child_result, spawn, workbench_cmd

GOALS = {"coarse": 0.5, "sb3": 0.15}  # the sweep's wall ≤ this × the contender's
SWEEP_RE = re.compile(r"sweep of (\d+) trials in [\d.]+ s.*?(\d+) solved")


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_sweep(seeds: int, tmp: str, timeout: float) -> dict:
    out, wall, rc = spawn(workbench_cmd() + ["sweep", str(QUICKSTART), "--seeds", str(seeds)], timeout, tmp)
    match = SWEEP_RE.search(out)
    if match is None:
        print(f"  sweep FAILED (exit {rc}):\n    " + "\n    ".join(out.strip().splitlines()[-8:]), flush=True)
    return {"wall_s": wall, "solved": int(match.group(2)) if match else 0}


def run_one_by_one(policy: str, seeds: int, tmp: str, timeout: float) -> dict:
    started, solved = time.perf_counter(), 0
    for seed in range(1, seeds + 1):
        out, _, rc = spawn(
            workbench_cmd()
            + ["run", str(QUICKSTART), "--policy", policy, "--set", f"cfg.seed={seed}", "--no-progress"],
            timeout,
            tmp,
        )
        solved += rc == 0 and "solved" in out
    return {"wall_s": time.perf_counter() - started, "solved": solved}


def run_sb3(seeds: int, tmp: str, timeout: float) -> dict:
    def one(seed: int) -> bool:
        out, _, _ = spawn(child_command("--child", "sb3", "--seed", str(seed)), timeout, tmp, peer=True)
        result = child_result(out)
        return bool(result and result.get("solved"))

    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        solved = sum(pool.map(one, range(1, seeds + 1)))
    return {"wall_s": time.perf_counter() - started, "solved": solved}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--inline", action="store_true", help="also time N sequential inline runs")
    parser.add_argument("--no-sb3", action="store_true", help="leave SB3 out")
    parser.add_argument("--only", nargs="+", help="run only these contenders (sweep coarse inline sb3)")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()

    PEER_ENV.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    who = ["sweep", "coarse"] + (["inline"] if args.inline else [])
    if not args.no_sb3:
        if importlib.util.find_spec("stable_baselines3") is None:
            print("SB3: skipped — stable_baselines3 is not importable (pip install stable-baselines3)")
        else:
            who.append("sb3")
    if args.only:
        who = [w for w in who if w in args.only]
    print(f"{args.seeds} seeds, {args.reps} rep(s); contenders: {', '.join(who)}\nload before: {load()}", flush=True)
    results: dict[str, list[dict]] = {w: [] for w in who}
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        for rep in range(args.reps):
            order = who[rep % len(who) :] + who[: rep % len(who)]
            for w in order:
                if w == "sweep":
                    r = run_sweep(args.seeds, tmp, args.timeout)
                elif w == "sb3":
                    r = run_sb3(args.seeds, tmp, args.timeout)
                else:
                    r = run_one_by_one(w, args.seeds, tmp, args.timeout)
                results[w].append(r)
                print(
                    f"  rep {rep + 1} {w:6s}: {r['wall_s']:6.1f} s, {r['solved']}/{args.seeds} solved "
                    f"(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print(f"load after: {load()}\n{time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} CPUs\n")
    names = {
        "sweep": "`workbench sweep --seeds N` (one process, embedded 2-worker cluster)",
        "coarse": "N × `workbench run --policy coarse`, one after another",
        "inline": "N × `workbench run --policy inline`, one after another",
        "sb3": "SB3 rl-zoo PPO, 2 processes at a time, 1 torch thread each",
    }
    sweep = statistics.median(r["wall_s"] for r in results["sweep"]) if results.get("sweep") else float("nan")
    print("| | wall, all seeds (s) | solved | sweep ÷ this | goal |")
    print("|---|---|---|---|---|")
    for w, rows in results.items():
        wall = statistics.median(r["wall_s"] for r in rows)
        solved = "/".join(str(r["solved"]) for r in rows)
        ratio = sweep / wall if w != "sweep" else 1.0
        goal = GOALS.get(w)
        verdict = f"≤ {goal}: {'met' if ratio <= goal else 'NOT met'}" if goal else ""
        print(f"| {names[w]} | {wall:.1f} | {solved} | {ratio:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
