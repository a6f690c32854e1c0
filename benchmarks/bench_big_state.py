"""What a big model costs a run outside its cells: deploying it, snapshotting it, exporting it.

    python -m benchmarks bench_big_state                    # deploy + export, then pacing
    python -m benchmarks bench_big_state --parts export     # deploy + export only
    python -m benchmarks bench_big_state --size small       # the notebook's small model

GRPO (``workbench.algorithms.grpo``) with the ~113M-parameter Llama of ``bench_llm_rl.py
--size 100m`` given as ``cfg.model``, under GPUOnly on a 1-worker LocalCluster (started
before the clocks), tiny generation batches so the cells stay short:

- **export**: one iteration with ``keep_state=True``. Printed: seconds outside the cells up
  to the end of iteration 1 (deploying the notebook's values, the model among them), the
  whole run, and the export (the run's end after iteration 1: every replica's state to the
  notebook).
- **pacing**: ``--iterations`` iterations with a learner snapshot every iteration
  (``snapshot_every=1``) and with workbench's pacing (the default), the seconds of each
  iteration after the first (`workbench.runtime.state.snapshot_pacing`).

After each run it prints the worker's resident memory (what a run ended on it leaves behind:
`workbench.runtime.process.malloc.release_free_memory`). Numbers from one run each: the figures in
docs/reliability.md and docs/llm.md come from here.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from workbench.algorithms import grpo

from benchmarks import harness

SIZES = {"small": {}, "100m": {"hidden": 768, "layers": 12, "heads": 12}}


def _fdg(size: str):
    cfg = dataclasses.replace(
        grpo.GRPOConfig(), **SIZES[size], prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=1_000_000
    )
    model = grpo.make_model(cfg, grpo.tokenizer)
    return grpo.build_fdg(dict(vars(grpo), cfg=dataclasses.replace(cfg, model=model)))


def _worker_mb(client) -> str:
    from workbench.runtime.process.malloc import resident_bytes

    return ", ".join(f"{(rss or 0) / 2**20:,.0f} MiB" for rss in client.run(resident_bytes).values())


def _cells_s(row: dict) -> float:
    return sum(v for k, v in row.items() if k.startswith("time/") and k.endswith("compute_s"))


def bench_export(client, size: str) -> None:
    fdg = _fdg(size)
    started = time.perf_counter()
    run = fdg.run(iterations=1, steps=1, policy="gpuonly", cluster=client, progress=False, keep_state=True)
    whole = time.perf_counter() - started
    first = run.rows[0]
    print(
        f"export ({size}): outside the cells to the end of iteration 1 {first['time_s'] - _cells_s(first):.1f} s; "
        f"whole run {whole:.1f} s; export {whole - first['time_s']:.1f} s; worker after it {_worker_mb(client)}",
        flush=True,
    )


def bench_pacing(client, size: str, iterations: int) -> None:
    for label, every in (("a snapshot every iteration", 1), ("paced (default)", None)):
        run = _fdg(size).run(
            iterations=iterations,
            steps=1,
            policy="gpuonly",
            cluster=client,
            progress=False,
            keep_state=False,
            snapshot_every=every,
        )
        times = [b["time_s"] - a["time_s"] for a, b in zip(run.rows, run.rows[1:])]
        print(
            f"pacing ({size}), {label}: iterations 2..{iterations} took "
            + ", ".join(f"{t:.1f}" for t in times)
            + f" s; worker after it {_worker_mb(client)}",
            flush=True,
        )


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--parts", nargs="+", choices=("export", "pacing"), default=["export", "pacing"])
    parser.add_argument("--iterations", type=int, default=5, help="iterations of each pacing run")
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR) as cluster,
        Client(cluster) as client,
    ):
        if "export" in args.parts:
            bench_export(client, args.size)
        if "pacing" in args.parts:
            bench_pacing(client, args.size, args.iterations)


if __name__ == "__main__":
    main()
