"""Cost of the runtime's timing instrumentation on the quickstart PPO (inline).

Runs ``workbench.algorithms.ppo.build_fdg()`` inline for ``--iterations`` iterations of
``cfg.num_steps`` steps with the per-cell clock on and off (its documented switch,
``workbench.runtime.replicas.replica.TIMING``: docs/profiling.md), interleaved (on, off,
off, on, …) so machine noise hits both alike, and compares the medians of env-steps/s.

    python -m benchmarks bench_instrumentation            # 60 iterations, 5 repeats
    python -m benchmarks bench_instrumentation --repeats 7

The off case still runs the per-task bookkeeping (a few clock reads per task, not per step).
"""

from __future__ import annotations

from benchmarks import harness


def main() -> None:
    parser = harness.parser(__doc__, repeats=5, json_output=True)
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()

    from workbench.algorithms import ppo
    from workbench.runtime.replicas import replica

    ppo.build_fdg().run(iterations=2, steps=8, progress=False)  # warm up imports
    cfg = ppo.PPOConfig()

    def rate(timing: bool) -> dict:
        replica.TIMING = timing
        try:
            run, call = harness.timed(
                lambda: ppo.build_fdg({**vars(ppo), "cfg": cfg}).run(
                    iterations=args.iterations, steps=cfg.num_steps, progress=False
                )
            )
        finally:
            replica.TIMING = True
        return {"sps": run.steps_per_second, "env_steps": run.env_steps, "call_s": call}

    def report(name: str, turn: int, got: dict) -> None:
        print(
            f"  repeat {turn}: timing {name:3s} {got['sps']:10,.0f} env-steps/s "
            f"({got['env_steps']:,} steps, call {got['call_s']:.2f} s)",
            flush=True,
        )

    results = harness.interleaved({"on": lambda: rate(True), "off": lambda: rate(False)}, args.repeats, report)
    sps = {name: [r["sps"] for r in rows] for name, rows in results.items()}
    on, off = harness.median(sps["on"]), harness.median(sps["off"])
    print(
        f"\nmedian env-steps/s: timing on {on:,.0f}, off {off:,.0f}; "
        f"instrumentation cost {100 * (off - on) / off:+.2f} % of throughput "
        f"(spread: on {min(sps['on']):,.0f}–{max(sps['on']):,.0f}, "
        f"off {min(sps['off']):,.0f}–{max(sps['off']):,.0f})"
    )
    harness.write_json(args.json, results)


if __name__ == "__main__":
    main()
