"""A user's own ``dask worker`` processes vs the embedded cluster, side by side in one run.

Starts a scheduler and two workers from the shell as a user would (``dask scheduler``,
``dask worker ADDRESS --nthreads 1``; both on loopback here), and the embedded 2-worker
LocalCluster, then runs the quickstart PPO (``workbench.algorithms.ppo``) under
SingleLearnerCoarse on each, alternating seeds so machine noise hits both alike. Reports
median env-steps/s and time to solve (mean of the last 20 returns ≥ 475), and the ratio.

    python benchmarks/bench_external_workers.py                 # 3 seeds each
    python benchmarks/bench_external_workers.py --seeds 1 2 3 4 5
    python benchmarks/bench_external_workers.py --no-setup      # without workbench's worker setup

``--no-setup`` turns off workbench's worker setup plugin (``workbench.cluster.worker_setup``)
to show what it is worth.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def user_cluster(workers: int = 2):
    """``dask scheduler`` + ``dask worker --nthreads 1`` processes, as a user starts them."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", "127.0.0.1:0"], **quiet)]
    try:
        for _ in range(workers):
            procs.append(subprocess.Popen(["dask", "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                           "--dashboard-address", "127.0.0.1:0"], **quiet))
        from distributed import Client

        client = Client(address, timeout=60, set_as_default=False)
        client.wait_for_workers(workers, timeout=120)
        yield client
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def run_once(client, seed: int) -> dict:
    from workbench.algorithms import ppo

    cfg = ppo.PPOConfig(seed=seed)
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, policy="coarse", cluster=client,
                  target_return=cfg.target_return, progress=False)
    solved = run.solved_at
    return {"sps": run.steps_per_second, "time": solved["time_s"] if solved else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--no-setup", action="store_true", help="without workbench's worker setup plugin")
    args = parser.parse_args()
    if args.no_setup:
        import workbench.cluster.worker_setup as setup

        setup.ensure_worker_setup = lambda client: None  # noqa: E731  (the backend calls it at run start)
    from workbench.algorithms import ppo
    from workbench.cluster.connect import embedded_cluster

    embedded = embedded_cluster(quiet=True).client
    ppo.build_fdg().run(iterations=1, steps=4, progress=False)  # warm this process up
    results: dict[str, list[dict]] = {"external dask worker": [], "embedded LocalCluster": []}
    with user_cluster() as external:
        for client in (external, embedded):  # first runs import torch on the workers: untimed
            run_once(client, 0)
        for seed in args.seeds:
            for name, client in (("external dask worker", external), ("embedded LocalCluster", embedded)):
                results[name].append(run_once(client, seed))
                r = results[name][-1]
                print(f"  {name:22s} seed {seed}: {r['sps']:,.0f} env-steps/s, solved in {r['time']:.2f} s",
                      flush=True)
    print(f"\nworker setup plugin: {'off' if args.no_setup else 'on'}; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores")
    print("| workers | median env-steps/s | median time to solve (s) |")
    print("|---|---|---|")
    medians = {}
    for name, rows in results.items():
        medians[name] = statistics.median(r["sps"] for r in rows)
        times = [r["time"] for r in rows if r["time"] == r["time"]]
        print(f"| {name} | {medians[name]:,.0f} | {statistics.median(times) if times else float('nan'):.2f} |")
    print(f"\nexternal / embedded env-steps/s: "
          f"{medians['external dask worker'] / medians['embedded LocalCluster']:.2f}×")


if __name__ == "__main__":
    main()
