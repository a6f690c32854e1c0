"""Soak: a long run and many short runs, checking that nothing grows.

The reliability bar: 2,000 iterations of a small FDG with no growth in worker memory beyond a
stated bound and no leaked threads, futures or files. On a 2-worker ``LocalCluster`` on
loopback (its dashboard on a free port) this script

1. runs the quickstart PPO FDG (``workbench.algorithms.ppo``, its cells unchanged; the config's
   ``iterations`` set to the soak's so the learning rate anneals over it) for ``--iterations``
   iterations as ONE run, sampling every ``--every`` iterations (from a logger, in the driver
   thread) each worker's RSS, threads, open fds and sockets (read from ``/proc`` by pid),
   the same for this process (which also hosts the scheduler), the futures the client holds
   and the tasks on the scheduler;
2. then reuses that FDG for ``--runs`` short runs of ``--short-iterations`` iterations each
   (each deploys replicas with socket servers and subscribes to an event topic: leaks across
   runs are the likelier kind) and samples the same after them, plus the event topics the
   scheduler keeps, the client's event handlers and the replicas left deployed on workers.

It prints both tables and a verdict, and exits 1 when a bound is exceeded:

* memory: each worker's RSS may grow at most ``--bound-mb`` from iteration ``--warmup`` to the
  end of the long run, and over the short runs (after ``--warm-runs``);
* threads / fds: per process, at most ``--slack-threads`` / ``--slack-fds`` more at the end
  than after warm-up (long run) or after run ``--warm-runs`` (short runs);
* after the short runs: no futures held, no tasks on the scheduler, no replicas deployed, no
  more client event handlers than after run ``--warm-runs``, and the event topics the
  scheduler keeps bounded: no more after the last run than half-way through the runs (the
  /workbench page reads past runs from them, so a few may stay).

Dask keeps some bounded histories on every worker (``distributed.admin.low-level-log-length``,
1000 by default): the statistical profiler's last 1000 one-second cycles and the last 1000
batches sent to the scheduler. They grow for the first ~17 minutes of a run and then stay;
``--worker-log-length N`` starts the workers with N instead, to tell them from real growth.

    python -m benchmarks soak                          # 2,000 iterations + 50 runs of 10, coarse
    python -m benchmarks soak --policy fine --json soak.json
    python -m benchmarks soak --fdg toy --iterations 500 --runs 20   # torch-free, quick
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from benchmarks import harness


# ----------------------------------------------------------------------------- the FDGs
def ppo_fdg(iterations: int):
    """The quickstart PPO FDG (its cells byte for byte), its config annealing over ``iterations``."""
    from workbench.algorithms import ppo

    return ppo.build_fdg({**vars(ppo), "cfg": ppo.PPOConfig(iterations=iterations)})


def toy_fdg():
    """The torch-free counters loop (every interface kind, a few counters)."""
    from workbench.algorithms import counters

    return counters.build_fdg()


# ----------------------------------------------------------------------------- sampling
def process_stats(pid: int, reads: int = 1) -> dict:
    """RSS (MB), threads, open fds and how many of them are sockets, of a local process.
    With ``reads`` > 1, the counts are the least of that many reads 0.1 s apart, so a
    thread or socket that is just going away (a loop ending) is not counted."""
    import psutil

    proc = psutil.Process(pid)
    fd_dir = f"/proc/{pid}/fd"
    out: dict = {}
    for i in range(reads):
        if i:
            time.sleep(0.1)
        fds = sockets = 0
        for fd in os.listdir(fd_dir):
            fds += 1
            try:
                sockets += os.readlink(os.path.join(fd_dir, fd)).startswith("socket:")
            except OSError:  # closed while we looked
                pass
        now = {"threads": proc.num_threads(), "fds": fds, "sockets": sockets}
        out = {k: min(v, out.get(k, v)) for k, v in now.items()}
    return {"rss_mb": proc.memory_info().rss / 2**20, **out}


def _scheduler_counts(dask_scheduler=None) -> dict:
    broker = getattr(dask_scheduler, "_broker", None)
    topics = getattr(broker, "_topics", {})
    return {
        "tasks": len(dask_scheduler.tasks),
        "topics": sum(1 for t in topics if str(t).startswith("workbench")),
        "topic_events": sum(len(v.events) for t, v in topics.items() if str(t).startswith("workbench")),
    }


def _deployed(dask_worker=None) -> int:
    plugin = dask_worker.plugins.get("workbench")
    return len(getattr(plugin, "deployed", {})) if plugin is not None else 0


class Probe:
    """Samples the workers (by pid, found once), this process and the scheduler."""

    def __init__(self, client) -> None:
        from workbench.cluster._dask_compat import workers_info

        self.client = client
        pids = client.run(os.getpid)
        names = {addr: str(w.get("name", addr)) for addr, w in workers_info(client).items()}
        self.workers = {f"w{names[a]}": pid for a, pid in sorted(pids.items(), key=lambda kv: names[kv[0]])}
        self.started = time.perf_counter()

    def sample(self, *, deep: bool = False, **label) -> dict:
        out = {**label, "t_s": round(time.perf_counter() - self.started, 2)}
        reads = 3 if deep else 1  # between runs: leave out threads that are just exiting
        for name, pid in self.workers.items():
            out[name] = process_stats(pid, reads)
        out["client"] = process_stats(os.getpid(), reads)
        out["futures"] = len(self.client.futures)
        out.update(self.client.run_on_scheduler(_scheduler_counts))
        out["handlers"] = sum(1 for t in getattr(self.client, "_event_handlers", {}) if str(t).startswith("workbench"))
        if deep:
            out["deployed"] = sum(self.client.run(_deployed).values())
        return out

    def settle(self, timeout: float = 5.0) -> float:
        """Wait (up to ``timeout``) for the scheduler to forget a finished run's tasks; the
        release travels asynchronously. Returns the seconds it took."""
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if not self.client.futures and self.client.run_on_scheduler(_scheduler_counts)["tasks"] == 0:
                break
            time.sleep(0.05)
        return time.perf_counter() - start


class SamplingLogger:
    """A run logger (``log(row)`` / ``close()``) that samples every ``every`` iterations."""

    def __init__(self, probe: Probe, every: int, total: int, warmup: int) -> None:
        self.probe, self.every, self.total, self.warmup = probe, every, total, warmup
        self.samples: list[dict] = []

    def log(self, row: dict) -> None:
        done = row["iteration"] + 1
        if done in (1, self.warmup, self.total) or done % self.every == 0:
            self.samples.append(self.probe.sample(iteration=done))

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- tables
def table(samples: list[dict], key: str, workers: list[str], extra: tuple[str, ...]) -> str:
    procs = [*workers, "client"]
    head = [key, "t (s)"] + [f"{p} RSS MB" for p in procs] + [f"{p} thr/fds/socks" for p in procs] + list(extra)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in samples:
        cells = [str(s[key]), f"{s['t_s']:.1f}"] + [f"{s[p]['rss_mb']:.1f}" for p in procs]
        cells += [f"{s[p]['threads']}/{s[p]['fds']}/{s[p]['sockets']}" for p in procs]
        cells += [str(s.get(x, "")) for x in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- checks
def growth_checks(phase: str, first: dict, last: dict, procs: list[str], args, *, memory: list[str]) -> list[dict]:
    checks = []
    for p in procs:
        if p in memory:
            grew = last[p]["rss_mb"] - first[p]["rss_mb"]
            checks.append(
                {
                    "check": f"{phase}: {p} RSS growth",
                    "value": f"{grew:+.1f} MB",
                    "bound": f"≤ {args.bound_mb:g} MB",
                    "ok": grew <= args.bound_mb,
                }
            )
        for what, slack in (("threads", args.slack_threads), ("fds", args.slack_fds)):
            grew = last[p][what] - first[p][what]
            checks.append(
                {
                    "check": f"{phase}: {p} {what}",
                    "value": f"{first[p][what]} → {last[p][what]}",
                    "bound": f"≤ +{slack}",
                    "ok": grew <= slack,
                }
            )
    return checks


def main() -> int:
    parser = harness.parser(__doc__, json_output=True)
    parser.add_argument("--iterations", type=int, default=2000, help="the long run's iterations (default 2000)")
    parser.add_argument("--steps", type=int, default=32, help="steps per iteration (default 32, the quickstart's)")
    parser.add_argument("--policy", default="coarse", help="any preset name or FILE.json (default coarse)")
    parser.add_argument("--fdg", choices=("ppo", "toy"), default="ppo", help="the quickstart PPO or the torch-free toy")
    parser.add_argument("--every", type=int, default=100, help="sample every N iterations (default 100)")
    parser.add_argument(
        "--warmup", type=int, default=200, help="memory growth is counted from this iteration (default 200)"
    )
    parser.add_argument("--runs", type=int, default=50, help="short runs after the long one (default 50)")
    parser.add_argument("--short-iterations", type=int, default=10, help="iterations per short run (default 10)")
    parser.add_argument(
        "--warm-runs", type=int, default=5, help="short-run growth is counted from this run (default 5)"
    )
    parser.add_argument("--bound-mb", type=float, default=50.0, help="allowed RSS growth per worker (default 50 MB)")
    parser.add_argument(
        "--slack-threads", type=int, default=2, help="allowed thread-count growth per process (default 2)"
    )
    parser.add_argument("--slack-fds", type=int, default=4, help="allowed open-fd growth per process (default 4)")
    parser.add_argument(
        "--worker-log-length",
        type=int,
        metavar="N",
        help="the workers' distributed.admin.low-level-log-length (default: Dask's, 1000)",
    )
    args = parser.parse_args()
    warmup = min(args.warmup, max(1, args.iterations // 10))
    warm_runs = min(args.warm_runs, max(1, args.runs // 2))

    import dask
    from distributed import Client, LocalCluster

    from workbench.cluster.connect import _warm_up

    # the embedded cluster's settings (glibc's malloc trim threshold), but the dashboard on a
    # free port: 8787 may be someone else's
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        worker_config = {}
        if args.worker_log_length is not None:  # the workers' config only; the scheduler keeps Dask's
            worker_config["config"] = dask.config.merge(
                dask.config.config, {"distributed": {"admin": {"low-level-log-length": args.worker_log_length}}}
            )
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
            **worker_config,
        )
    with cluster, Client(cluster, set_as_default=False) as client:
        client.run(_warm_up)
        probe = Probe(client)
        workers = list(probe.workers)
        procs = [*workers, "client"]
        fdg = ppo_fdg(args.iterations) if args.fdg == "ppo" else toy_fdg()
        print(
            f"soak: {args.fdg} FDG, policy {args.policy}, {args.iterations} iterations × {args.steps} steps, "
            f"then {args.runs} runs × {args.short_iterations}; 2 workers (pids "
            f"{', '.join(f'{k}={v}' for k, v in probe.workers.items())}), dashboard {client.dashboard_link}; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
            flush=True,
        )
        before = probe.sample(deep=True, iteration=0)

        # 1. one long run
        logger = SamplingLogger(probe, args.every, args.iterations, warmup)
        start = time.perf_counter()
        run = fdg.run(
            iterations=args.iterations,
            steps=args.steps,
            policy=args.policy,
            cluster=client,
            progress=False,
            loggers=[logger],
        )
        long_s = time.perf_counter() - start
        settle_s = probe.settle()
        after_long = probe.sample(deep=True, iteration="after")
        long_samples = [before, *logger.samples, after_long]
        ret = run.mean_return()
        print(
            f"\n## {args.iterations} iterations in one run: {run.status} in {long_s:.0f} s "
            f"({run.steps_per_second:,.0f} env-steps/s, mean return {ret if ret is None else round(ret)}, "
            f"policy {run.policy_name}); load average now {os.getloadavg()[0]:.2f}\n"
        )
        print(table(long_samples, "iteration", workers, ("futures", "tasks", "topics", "topic_events", "handlers")))
        print(
            f"(after: once the run returned and the scheduler forgot its tasks, {settle_s:.2f} s later; "
            f"replicas still deployed: {after_long['deployed']})"
        )
        at_warmup = next(s for s in logger.samples if s["iteration"] == warmup)
        at_end = next(s for s in logger.samples if s["iteration"] == args.iterations)
        checks = growth_checks(
            f"long run, iteration {warmup} → {args.iterations}", at_warmup, at_end, procs, args, memory=workers
        )

        # 2. many short runs of the same FDG
        short_samples = [after_long]
        half = max(warm_runs, args.runs // 2)
        marks = {1, warm_runs, half, args.runs} | set(range(0, args.runs + 1, max(1, args.runs // 10)))
        start = time.perf_counter()
        for number in range(1, args.runs + 1):
            fdg.run(
                iterations=args.short_iterations, steps=args.steps, policy=args.policy, cluster=client, progress=False
            )
            if number in marks:
                probe.settle()
                short_samples.append(probe.sample(deep=True, run=number))
        short_s = time.perf_counter() - start
        after_long["run"] = 0
        print(
            f"\n## {args.runs} runs × {args.short_iterations} iterations: {short_s:.0f} s "
            f"({short_s / max(1, args.runs):.2f} s a run); load average now {os.getloadavg()[0]:.2f}\n"
        )
        print(
            table(short_samples, "run", workers, ("futures", "tasks", "topics", "topic_events", "handlers", "deployed"))
        )
        first = next(s for s in short_samples if s.get("run") == warm_runs)
        last = short_samples[-1]
        phase = f"{args.runs} short runs, run {warm_runs} → {args.runs}"
        checks += growth_checks(phase, first, last, procs, args, memory=workers)
        for what in ("futures", "tasks", "deployed"):
            checks.append(
                {"check": f"{phase}: {what} left", "value": str(last[what]), "bound": "0", "ok": last[what] == 0}
            )
        checks.append(
            {
                "check": f"{phase}: client event handlers",
                "value": f"{first['handlers']} → {last['handlers']}",
                "bound": "no growth",
                "ok": last["handlers"] <= first["handlers"],
            }
        )
        middle = next(s for s in short_samples if s.get("run") == half)
        checks.append(
            {
                "check": f"{args.runs} short runs, run {half} → {args.runs}: scheduler event topics",
                "value": f"{middle['topics']} → {last['topics']} ({last['topic_events']} events)",
                "bound": "no growth",
                "ok": last["topics"] <= middle["topics"],
            }
        )

    print("\n## verdict\n")
    print("| check | value | bound | |\n|---|---|---|---|")
    for c in checks:
        print(f"| {c['check']} | {c['value']} | {c['bound']} | {'ok' if c['ok'] else 'EXCEEDED'} |")
    failed = [c for c in checks if not c["ok"]]
    print(f"\nsoak: {'PASS' if not failed else f'FAIL ({len(failed)} of {len(checks)} checks exceeded)'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "args": vars(args),
                    "cpus": os.cpu_count(),
                    "load_average_end": os.getloadavg(),
                    "long": long_samples,
                    "short": short_samples,
                    "checks": checks,
                    "long_run_s": long_s,
                    "short_runs_s": short_s,
                },
                fh,
                indent=1,
                default=str,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
