"""What one video clip of a trained policy costs, against the quickstart's training.

Trains the quickstart PPO inline for ``--iterations`` iterations, then, interleaved with
training runs of the same length so machine noise hits all alike, measures ``run.show()``
(one greedy episode of the first env, rendered and encoded as an mp4) and
``run.evaluate(10)``. The table gives each one's median seconds and, for a clip every N
iterations, its cost as a share of N iterations' training time: what ``--video-every N``
would cost at that N.

    python -m benchmarks bench_video                # 60 iterations, 3 repeats
    python -m benchmarks bench_video --repeats 5
"""

from __future__ import annotations

from benchmarks import harness


def main() -> None:
    parser = harness.parser(__doc__, repeats=3, json_output=True)
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()

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
    harness.write_json(args.json, {"seconds": seconds, "results": results})


if __name__ == "__main__":
    main()
