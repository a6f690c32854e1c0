"""What clips of a trained policy cost, against the quickstart's training.

Part ``clip`` trains the quickstart PPO inline for ``--iterations`` iterations, then,
interleaved with training runs of the same length so machine noise hits all alike, measures
``run.show()`` (one greedy episode of the first env, rendered and encoded as an mp4) and
``run.evaluate(10)``; the table gives each one's median seconds and, for a clip every N
iterations, its share of N iterations' training time were it made on the training's path.

Part ``live`` measures what ``--video-every`` costs: the quickstart trained under
``--policy`` (coarse: the embedded 2-worker cluster) for ``--live-iterations`` iterations,
with clips every ``--every`` iterations (default: ``--video-every``'s own) and without,
interleaved; the table gives each one's median training throughput (env-steps/s by the
run's clock after its first iteration) and the cost, 1 − with/without. Each run waits for
its last clip before the next starts, so no clip runs into another's measurement.

    python -m benchmarks bench_video                      # both parts, 3 repeats
    python -m benchmarks bench_video --parts live --repeats 5 --policy inline
"""

from __future__ import annotations

from benchmarks import harness


def main() -> None:
    from workbench.config import DEFAULT_VIDEO_EVERY

    parser = harness.parser(__doc__, repeats=3, json_output=True)
    parser.add_argument("--parts", default="clip,live", help="comma-separated: clip, live")
    parser.add_argument("--iterations", type=int, default=60, help="part clip: iterations of a training run")
    parser.add_argument("--live-iterations", type=int, default=400, help="part live: iterations of a training run")
    parser.add_argument("--every", type=int, default=DEFAULT_VIDEO_EVERY, help="part live: --video-every N")
    parser.add_argument("--policy", default="coarse", help="part live: the placement")
    args = parser.parse_args()
    parts = args.parts.split(",")
    payload = {}
    if "clip" in parts:
        payload["clip"] = clip_part(args)
    if "live" in parts:
        payload["live"] = live_part(args)
    harness.write_json(args.json, payload)


def clip_part(args) -> dict:
    from workbench.algorithms import ppo

    trained = ppo.build_fdg().run(iterations=400, steps=16, target_return=475, progress=False)
    trained.show()  # warm up: pygame, ffmpeg's first start

    def train() -> float:
        run, _ = harness.timed(lambda: ppo.build_fdg().run(iterations=args.iterations, steps=16, progress=False))
        return harness.training_seconds(run) / run.completed_iterations

    contenders = {
        "train (s an iteration)": train,
        "show(1 episode)": lambda: harness.timed(trained.show)[1],
        "evaluate(10)": lambda: harness.timed(lambda: trained.evaluate(10))[1],
    }
    results = harness.interleaved(
        contenders, args.repeats, lambda name, turn, s: print(f"  repeat {turn}: {name:24s} {s:.4f} s", flush=True)
    )
    seconds = {name: harness.median(values) for name, values in results.items()}
    iteration, clip = seconds["train (s an iteration)"], seconds["show(1 episode)"]
    print(
        f"\nmedians of {args.repeats}: an iteration {iteration * 1000:.1f} ms, a clip (500 frames) {clip:.2f} s, "
        f"evaluate(10) {seconds['evaluate(10)']:.2f} s\n"
    )
    print(
        harness.table(
            [
                {
                    "a clip every N iterations": n,
                    "clip share of training time (%)": round(100 * clip / (clip + n * iteration), 1),
                }
                for n in (10, 50, 100, 500, 1000)
            ]
        )
    )
    return {"seconds": seconds, "results": results}


def live_part(args) -> dict:
    from workbench.algorithms import ppo

    def train(every):
        run = ppo.build_fdg().run(
            iterations=args.live_iterations, policy=args.policy, video_every=every, progress=False, run_store="off"
        )
        clips = len(run.wait_for_clips())  # the last one is made before the next run starts
        return harness.clock_rate(run), clips

    made: dict[str, list[int]] = {"with clips": [], "without": []}

    def arm(name, every):
        def measure() -> float:
            rate, clips = train(every)
            made[name].append(clips)
            return rate

        return measure

    train(None)  # warm up: the cluster, imports
    results = harness.interleaved(
        {"with clips": arm("with clips", args.every), "without": arm("without", None)},
        args.repeats,
        lambda name, turn, sps: print(f"  repeat {turn}: {name:12s} {sps:,.0f} env-steps/s", flush=True),
    )
    with_clips, without = harness.median(results["with clips"]), harness.median(results["without"])
    cost = 1 - with_clips / without
    print(
        f"\n{args.policy}, {args.live_iterations} iterations, --video-every {args.every}, medians of {args.repeats}:\n"
    )
    print(
        harness.table(
            [
                {"run": "without clips", "env-steps/s": round(without), "clips": 0},
                {"run": f"--video-every {args.every}", "env-steps/s": round(with_clips), "clips": made["with clips"]},
            ]
        )
    )
    print(f"\ncost: {100 * cost:.1f} % of training throughput")
    return {"results": results, "clips": made, "cost": cost, "every": args.every, "policy": args.policy}


if __name__ == "__main__":
    main()
