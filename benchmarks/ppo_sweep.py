"""Time-to-solve sweep for PPO on CartPole-v1: candidate configs × seeds, one markdown table.

    python benchmarks/ppo_sweep.py                                   # the PPOConfig defaults, seeds 1-5
    python benchmarks/ppo_sweep.py -c "" -c "num_envs=16,num_steps=64,update_epochs=4"
    python benchmarks/ppo_sweep.py -c "learning_rate=2e-3" --seeds 1 2 3 --iterations 150

Each ``-c`` is a comma-separated list of ``PPOConfig`` overrides on top of the defaults
("" = the defaults). Every run is exactly the measurement the docs use::

    ppo.cfg = <config>; run = ppo.build_fdg().run(iterations=cfg.iterations,
        steps=cfg.num_steps, target_return=475, progress=False); run.solved_at

Runs are interleaved (seed-major: every config runs seed 1, then every config seed 2, …) so
configs see the same machine load; report medians, not means. One untimed warm-up run comes
first: the first ``torch.optim`` optimizer in a process imports ``torch._dynamo`` (~1-1.5 s
once per process), which would otherwise land on whichever run goes first (``--no-warmup``
keeps it in, to see the cold-process time).

Columns: solved k/n; median wall seconds and env steps to solve (over the solved runs);
env-steps/s (all env steps / all wall time, solved or not).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from workbench.algorithms import ppo


def parse_overrides(text: str) -> dict:
    """``"num_envs=16,learning_rate=2e-3,anneal_lr=false"`` -> typed ``PPOConfig`` overrides."""
    fields = {f.name: f for f in dataclasses.fields(ppo.PPOConfig)}
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in fields:
            raise SystemExit(f"unknown PPOConfig field {key!r}; known: {', '.join(fields)}")
        kind = type(getattr(ppo.PPOConfig(), key))
        out[key] = value.strip().lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


def run_once(overrides: dict, seed: int, target: float, iterations: int | None = None):
    """One run of ``build_fdg()`` under ``overrides``; returns the ``Run``. ``ppo.cfg`` is restored."""
    saved = ppo.cfg
    ppo.cfg = dataclasses.replace(ppo.PPOConfig(), **overrides, seed=seed)
    try:
        return ppo.build_fdg().run(iterations=iterations or ppo.cfg.iterations,
                                   steps=ppo.cfg.num_steps, target_return=target, progress=False)
    finally:
        ppo.cfg = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", action="append", help="PPOConfig overrides (repeatable)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--iterations", type=int, default=None, help="override cfg.iterations' run length only")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
    args = ap.parse_args()
    configs = args.config if args.config else [""]
    if not args.no_warmup:
        run_once({}, seed=0, target=args.target, iterations=1)

    results: dict[str, list] = {c: [] for c in configs}
    for seed in args.seeds:
        for c in configs:
            start = time.perf_counter()
            run = run_once(parse_overrides(c), seed, args.target, args.iterations)
            wall = time.perf_counter() - start
            results[c].append((run.solved_at, run.env_steps, run.wall_time))
            if args.verbose:
                print(f"[{c or 'defaults'}] seed {seed}: solved_at={run.solved_at} "
                      f"({run.env_steps} env steps, {wall:.2f} s)", flush=True)

    print("\n| config | solved | median time-to-solve (s) | median env-steps to solve | env-steps/s |")
    print("|---|---|---|---|---|")
    for c, rows in results.items():
        solved = [s for s, _, _ in rows if s is not None]
        t = f"{statistics.median(s['time_s'] for s in solved):.2f}" if solved else "-"
        n = f"{statistics.median(s['env_steps'] for s in solved):,.0f}" if solved else "-"
        sps = sum(r[1] for r in rows) / max(1e-9, sum(r[2] for r in rows))
        times = " ".join(f"{s['time_s']:.2f}" if s else "x" for s, _, _ in rows)
        print(f"| `{c or 'defaults'}` | {len(solved)}/{len(rows)} | {t} ({times}) | {n} | {sps:,.0f} |")


if __name__ == "__main__":
    main()
