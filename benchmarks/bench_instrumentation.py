"""Cost of the runtime's timing instrumentation on the quickstart PPO (inline).

Runs ``workbench.algorithms.ppo.build_fdg()`` inline for ``--iterations`` iterations of
``cfg.num_steps`` steps with the per-cell clock on (``workbench.runtime.replicas.replica.TIMING``)
and off, interleaved (on, off, on, off, …) so machine noise hits both alike, and compares
the medians of env-steps/s.

    python benchmarks/bench_instrumentation.py            # 60 iterations, 5 pairs
    python benchmarks/bench_instrumentation.py --pairs 7

The off case still runs the per-task bookkeeping (a few clock reads per task, not per step).
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()

    from workbench.algorithms import ppo
    from workbench.runtime.replicas import replica

    ppo.build_fdg().run(iterations=2, steps=8, progress=False)  # warm up imports
    cfg = ppo.PPOConfig()
    sps: dict[bool, list[float]] = {True: [], False: []}
    for pair in range(args.pairs):
        for timing in ((True, False) if pair % 2 == 0 else (False, True)):
            replica.TIMING = timing
            fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
            started = time.perf_counter()
            run = fdg.run(iterations=args.iterations, steps=cfg.num_steps, progress=False)
            call = time.perf_counter() - started
            sps[timing].append(run.steps_per_second)
            print(f"  pair {pair}: timing {'on ' if timing else 'off'} {run.steps_per_second:10,.0f} "
                  f"env-steps/s ({run.env_steps:,} steps, call {call:.2f} s)", flush=True)
    replica.TIMING = True
    on, off = statistics.median(sps[True]), statistics.median(sps[False])
    print(f"\nmedian env-steps/s: timing on {on:,.0f}, off {off:,.0f}; "
          f"instrumentation cost {100 * (off - on) / off:+.2f} % of throughput "
          f"(spread: on {min(sps[True]):,.0f}–{max(sps[True]):,.0f}, off {min(sps[False]):,.0f}–{max(sps[False]):,.0f})")


if __name__ == "__main__":
    main()
