"""What taking turns with the random generators costs: env-steps/s with one and with two
acting replicas per worker process, on a 2-worker LocalCluster.

Replicas that share a process run one cell at a time (workbench/runtime/state/randomness.py);
compare revisions side by side with ``against`` (this benchmark, workbench from each revision):

    python -m benchmarks against 610a34b --repeats 2 -- bench_turns

Where the revision has ``RunConfig.own_random``, a last row runs the 2 ms case with it off.
"""

from __future__ import annotations

import logging
import time

import workbench as wb
from workbench.algorithms import ppo

from benchmarks import harness
from benchmarks.bench_policies import sleepy_fdg

ITERATIONS = 15


def rate(fdg, policy, client, steps: int | None = None, **options) -> float:
    """Env-steps/s of one run by wall clock, after a 2-iteration warm-up run."""
    kwargs = dict(options) if steps is None else {"steps": steps, **options}
    fdg.run(iterations=2, policy=policy, cluster=client, progress=False, **kwargs)
    start = time.perf_counter()
    run = fdg.run(iterations=ITERATIONS, policy=policy, cluster=client, progress=False, **kwargs)
    return run.env_steps / (time.perf_counter() - start)


def main() -> None:
    harness.parser(__doc__).parse_args()
    from distributed import Client

    from workbench.cluster.restart_tolerant import PatientLocalCluster

    cases = [
        ("quickstart PPO, coarse (one actor per worker)", ppo.build_fdg, "coarse", None),
        ("quickstart PPO, actors=4 (two per worker)", ppo.build_fdg, wb.SingleLearnerCoarse(actors=4), None),
        ("2 ms env, actors=4 (two per worker)", sleepy_fdg, wb.SingleLearnerCoarse(actors=4), 32),
    ]
    from workbench.config import RunConfig

    if "own_random" in RunConfig.__dataclass_fields__:  # a revision that has the switch
        cases.append(
            (
                "2 ms env, actors=4 (two per worker), own_random=False",
                sleepy_fdg,
                wb.SingleLearnerCoarse(actors=4),
                32,
                {"own_random": False},
            )
        )
    with (
        PatientLocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        print("| case | env-steps/s |\n|---|---|")
        for name, build, policy, steps, *options in cases:
            got = rate(build(), policy, client, steps, **(options[0] if options else {}))
            print(f"| {name} | {got:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
