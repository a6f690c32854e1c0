"""A user's own ``dask worker`` hosts vs the embedded cluster, side by side in one run.

Builds the layout a user has (issue 30): three network-namespace hosts on one bridge
(``tests/hosts/netns.py``), ``dask scheduler`` in the first, one ``dask worker --nthreads 1``
in each of the other two, and ``workbench run notebooks/quickstart.ipynb --policy coarse
--scheduler tcp://…`` from the first, as a user types it. The embedded cluster's runs are
the same command without ``--scheduler``, from the same host, so the two differ only in
where the workers are. Runs alternate (order rotating per seed) so machine noise hits
both alike; every run is a fresh process.

What it reports, per cluster: the median env-steps/s after the first ``--warmup``
iterations (a fresh embedded cluster imports torch on its workers while deploying; the
external workers did that in the untimed first run), the run's own env-steps/s, and where
each replica's time went per iteration (compute, waiting for inputs, sending, other):
the same columns the run's CSV (``--log-dir``), the run report's profile table
(``run.report()``) and the dashboard's ``/workbench`` page show. The ratio external /
embedded is the number to read (goal ≥ 0.95).

    sudo python -m benchmarks bench_external_workers                  # seeds 1 2 3, 40 iterations
    sudo python -m benchmarks bench_external_workers --seeds 1 2 3 4 5 --iterations 60

Needs root and iproute2 (``ip netns``). Every namespace, veth, bridge and process it made
is removed at the end, on an error, Ctrl-C or SIGTERM too.
"""

from __future__ import annotations

import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT
from tests.hosts.netns import Hosts, unavailable  # run from the checkout: its test hosts

NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
PORT = 8786
KINDS = ("compute", "wait", "send", "other")


def start_cluster(net: Hosts, logs: Path) -> str:
    """``dask scheduler`` on host 0 and ``dask worker --nthreads 1`` on hosts 1 and 2; the
    scheduler's address once both workers have joined."""
    address = f"tcp://{net.addresses[0]}:{PORT}"
    net.popen(
        0,
        [
            "dask",
            "scheduler",
            "--host",
            net.addresses[0],
            "--port",
            str(PORT),
            "--dashboard-address",
            f"{net.addresses[0]}:8787",
            "--preload",
            "workbench.cluster.dashboard",
        ],
        log=open(logs / "scheduler.log", "w"),
    )
    for i in (1, 2):
        net.popen(
            i,
            ["dask", "worker", address, "--nthreads", "1", "--name", f"w{i}", "--no-dashboard"],
            log=open(logs / f"worker{i}.log", "w"),
        )
    wait = (
        "from distributed import Client\n"
        f"c = Client({address!r}, timeout=120); c.wait_for_workers(2, timeout=180); c.close()"
    )
    done = net.run(0, [sys.executable, "-c", wait], timeout=300)
    if done.returncode:
        raise RuntimeError(f"the cluster did not come up:\n{done.stderr[-2000:]}")
    return address


def set_mtu(net: Hosts, mtu: int) -> None:
    """Every link of the hosts and the switch at ``mtu`` bytes."""
    links = [(net.switch, "br0")] + [(name, "eth0") for name in net.names]
    links += [(net.switch, f"port{i}") for i in range(len(net.names))]
    for ns, dev in links:
        subprocess.run(
            ["ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(mtu)], check=True, capture_output=True, timeout=20
        )


def run_once(net: Hosts, scheduler: str | None, seed: int, iterations: int, out: Path) -> Path:
    """``workbench run`` of the quickstart from host 0; the directory with its metrics.csv."""
    log_dir = out / f"{'external' if scheduler else 'embedded'}-{seed}-{time.monotonic_ns()}"
    cmd = [
        str(Path(sys.executable).with_name("workbench")),
        "run",
        str(NOTEBOOK),
        "--policy",
        "coarse",
        "--iterations",
        str(iterations),
        "--set",
        f"cfg.seed={seed}",
        "--log-dir",
        str(log_dir),
        "--no-progress",
        "--target-return",
        "1e12",
    ]  # never met: every run is exactly --iterations long
    if scheduler:
        cmd += ["--scheduler", scheduler]
    done = net.run(0, cmd, timeout=900, cwd=str(ROOT))
    # exit 1 with "the target return was not reached" is a finished run, of fixed length
    ended = any(line.startswith(("finished:", "solved:")) for line in done.stdout.splitlines())
    if not ended or not (log_dir / "metrics.csv").exists():
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return log_dir


def measure(log_dir: Path, warmup: int) -> dict:
    """Steady env-steps/s (after ``warmup`` iterations), the run's own, and seconds per
    iteration by kind (summed over the replicas) in the steady part."""
    with open(log_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    first, last = rows[min(warmup, len(rows) - 2)], rows[-1]
    span = float(last["time_s"]) - float(first["time_s"])
    steady = rows[rows.index(first) + 1 :]
    per_it = {
        k: sum(float(r[c] or 0) for r in steady for c in r if c.startswith("time/") and c.endswith(f" {k}_s"))
        / len(steady)
        for k in KINDS
    }
    return {
        "steady": (int(last["env_steps"]) - int(first["env_steps"])) / span,
        "run": float(last["charts/SPS"]),
        "per_it": per_it,
        "wire": statistics.mean(int(r["wire/bytes"] or 0) for r in steady),
    }


def main() -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5, help="iterations left out of the steady rate")
    parser.add_argument(
        "--mtu",
        type=int,
        default=None,
        help="the hosts' link MTU (default: the veth's 1500; loopback, where the embedded "
        "cluster talks, has 65536): to tell the network's per-packet cost from workbench's",
    )
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        print(f"cannot build the namespace hosts: {reason}", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so the finally below removes what was made
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    net = Hosts(3)
    if args.mtu:
        set_mtu(net, args.mtu)
    results: dict[str, list[dict]] = {"external dask workers": [], "embedded LocalCluster": []}
    try:
        with tempfile.TemporaryDirectory(prefix="wb-bench-ext-") as tmp:
            out = Path(tmp)
            scheduler = start_cluster(net, out)
            run_once(net, scheduler, 0, 3, out)  # the workers' first imports: untimed
            for n, seed in enumerate(args.seeds):
                order = [("external dask workers", scheduler), ("embedded LocalCluster", None)]
                for name, address in order[n % 2 :] + order[: n % 2]:
                    r = measure(run_once(net, address, seed, args.iterations, out), args.warmup)
                    results[name].append(r)
                    print(
                        f"  {name:22s} seed {seed}: {r['steady']:,.0f} env-steps/s steady "
                        f"({r['run']:,.0f} over the run)",
                        flush=True,
                    )
    finally:
        net.close()  # every process, namespace, veth and the bridge
    print(
        f"\nquickstart PPO (CartPole-v1) under coarse, {args.iterations} iterations, seeds {args.seeds}, "
        f"link MTU {args.mtu or 1500}; "
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    print(
        "| workers | median env-steps/s (steady) | over the run | s/iteration: "
        + " | ".join(KINDS)
        + " | wire bytes/it |"
    )
    print("|---|---|---|" + "---|" * len(KINDS) + "---|")
    medians = {}
    for name, rows in results.items():
        medians[name] = statistics.median(r["steady"] for r in rows)
        kinds = " | ".join(f"{statistics.median(r['per_it'][k] for r in rows):.4f}" for k in KINDS)
        print(
            f"| {name} | {medians[name]:,.0f} | {statistics.median(r['run'] for r in rows):,.0f} | {kinds} | "
            f"{statistics.median(r['wire'] for r in rows):,.0f} |"
        )
    ratio = medians["external dask workers"] / medians["embedded LocalCluster"]
    print(f"\nexternal / embedded env-steps/s (steady): {ratio:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
