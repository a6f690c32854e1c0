"""Every distribution policy on the same quickstart cells, and scaling past the cores.

Part 1 (``--presets``): the quickstart PPO under each preset on a 2-worker LocalCluster:
steady env-steps/s (first iterations left out), bytes on the wire per iteration, and wall
time to solve CartPole-v1 (mean of the last 20 returns ≥ 475), one run each.

Part 2 (``--scaling``): an environment whose step waits 2 ms (``--latency-ms``; a remote
simulator or game server answering) and steps 16 CartPoles, under SingleLearnerCoarse,
SingleLearnerFine and SingleLearnerFine acting on arrival (``act_on_arrival=True``: the actor
runs on whichever env replicas have answered) on 1, 2, 4, 8, 16 and 32 single-thread workers (weak scaling: one env
replica per worker, which each size's line checks; ``--sizes`` to choose). Rates come from
pairs of runs, 10 and 40 iterations, by wall clock (median of ``--pairs``). Efficiency =
throughput(W) / (W × throughput(1)). "cores busy" says when the machine, not the framework,
is the limit: each worker still spends CPU per step (CartPole, the cells, waking from the
wait). "actor's replica" splits the iteration of the replica that holds the actor into its
cells, its sends, its waits for values and the rest (the driver's ``time/…`` rows): where a
Fine step goes as the env replicas grow in number; and of its sends, its thread's CPU time
(a send's wall time beyond it waited: for the GIL, a core or a socket's buffer). Workers run with
``workbench.cluster.quiet_workers``'s settings unless ``--dask-defaults``.
A size or policy that fails shows its error in the table; the rest still run.

The "bare processes" rows are the control: the same loop (the actor's expression, the wait,
16 CartPoles) in W plain processes with no framework, no learner and no barrier between
iterations, timed the same way. It is what this machine gives at each size, so the gap
between it and a policy is the framework's, not the machine's (``--no-bare`` to skip).
The "bare lockstep" rows are Fine's control: one actor process and W env processes over
plain pipes, all observations in and one action batch out every step, no framework: what
a per-step exchange that waits for the slowest env gives on this machine. The "bare acting
on arrival" rows are the control of Fine acting on arrival: the same processes, the actor
answering whichever envs' observations are in, each with its own rows.

    python -m benchmarks bench_policies             # both parts
    python -m benchmarks bench_policies --presets   # part 1 only
    python -m benchmarks bench_policies --scaling --latency-ms 10 --sizes 1 8 32
"""

from __future__ import annotations

import functools
import logging
import statistics

from benchmarks import harness

#: workers per step of the scaling part (their envs wait, they do not compute: a 2-core box holds 32)
SIZES = (1, 2, 4, 8, 16, 32)

PRESETS = ["inline", "SingleLearnerCoarse", "SingleLearnerFine", "MultiLearner", "GPUOnly", "Async", "auto"]


def steady(run, skip: int = 5) -> tuple[float, float]:
    """(env-steps/s, median bytes per iteration) leaving out the first ``skip`` iterations."""
    rows = run.rows[skip:] if len(run.rows) > skip + 1 else run.rows
    return harness.clock_rate(run, skip + 1), statistics.median(r["wire/bytes"] for r in rows)


def presets(client) -> None:
    from workbench.algorithms import ppo

    ppo.build_fdg().run(iterations=1, steps=4, progress=False)  # warm this process up
    print("| policy | env-steps/s (steady) | bytes on the wire / iteration | time to solve (s) | env steps |")
    print("|---|---|---|---|---|")
    for policy in PRESETS:
        cfg = ppo.PPOConfig()
        fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
        run = fdg.run(
            iterations=cfg.iterations,
            steps=cfg.num_steps,
            policy=policy,
            cluster=client,
            target_return=cfg.target_return,
            progress=False,
        )
        rate, wire = steady(run)
        solved = run.solved_at
        print(
            f"| {run.policy_name} | {rate:,.0f} | {wire:,.0f} | {solved['time_s']:.2f} | {solved['env_steps']:,} |"
            if solved
            else f"| {run.policy_name} | {rate:,.0f} | {wire:,.0f} | not solved | — |",
            flush=True,
        )


SLEEPY = {
    ("env", "init"): "envs = wb.envs.make('CartPole-v1', num_envs=16, seed=replica.index)\nobs = envs.reset()",
    ("learner", "init"): "threshold = 0.0",
    # the actors act with the learner's latest value, as with weights: no replica can run
    # more than an iteration ahead of the learner (a decoupled loop would run ahead of the
    # driver's rows, and a rate taken from them would exceed what the envs can give)
    ("actor", "step"): "action = (obs[:, 2] > threshold).astype(np.int64)",
    ("env", "step"): "time.sleep(LATENCY_S)  # a remote simulator answering\n"
    "obs, reward, terminated, truncated, info = envs.step(action)",
    ("learner", "iteration"): "total = float(reward.sum())\nthreshold = 0.0 * total",
}


def sleepy_fdg(latency_ms: float = 2.0):
    import time

    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"wb": wb, "np": np, "time": time, "LATENCY_S": latency_ms / 1e3})
    for (name, rate), code in SLEEPY.items():
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def _bare_loop(steps: int, latency_s: float, seed: int, out, go) -> None:
    """One plain process stepping the scaling env's loop ``steps`` times (the control):
    says it is ready on ``out``, starts when ``go`` says so, then puts (wall, CPU) on ``out``."""
    import time

    import numpy as np

    import workbench as wb

    envs = wb.envs.make("CartPole-v1", num_envs=16, seed=seed)
    obs = envs.reset()
    for _ in range(20):  # warm: first calls, caches
        obs = envs.step((obs[:, 2] > 0.0).astype(np.int64))[0]
    out.put(seed)
    go.get()  # every process starts together
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        action = (obs[:, 2] > 0.0).astype(np.int64)
        time.sleep(latency_s)
        obs, reward, terminated, truncated, info = envs.step(action)
    out.put((time.perf_counter() - start, time.process_time() - cpu))


def _bare(workers: int, latency_ms: float, pairs: int, steps: int = 32 * 40) -> dict[str, float]:
    """The control: ``workers`` plain processes running the loop; rate by wall clock of
    the slowest (median of ``pairs``), cores busy from their CPU time."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    rates, cores = [], []
    for _ in range(pairs):
        ready, go = spawn.Queue(), spawn.Queue()
        procs = [spawn.Process(target=_bare_loop, args=(steps, latency_ms / 1e3, i, ready, go)) for i in range(workers)]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=300)
        for _ in procs:
            go.put(0)
        done = [ready.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        wall = max(d[0] for d in done)
        rates.append(workers * steps * 16 / wall)
        cores.append(sum(d[1] for d in done) / wall)
    return {"rate": statistics.median(rates), "cores": statistics.median(cores), "driver_ms": float("nan")}


def _lockstep_env(conn, latency_s: float, seed: int) -> None:
    """One env process of the lockstep control: an action in, the wait, 16 CartPoles, the
    observations out, over a plain pipe read by this loop itself (no threads)."""
    import time

    import numpy as np

    import workbench as wb

    envs = wb.envs.make("CartPole-v1", num_envs=16, seed=seed)
    conn.send(envs.reset())
    cpu = time.process_time()  # from here: the loop's CPU, not the imports'
    while (action := conn.recv()) is not None:
        time.sleep(latency_s)
        obs, reward, terminated, truncated, info = envs.step(np.asarray(action))
        conn.send(obs)
    conn.send(time.process_time() - cpu)


def _exchange(
    workers: int, latency_ms: float, pairs: int, steps: int = 32 * 40, on_arrival: bool = False
) -> dict[str, float]:
    """The controls for Fine: one actor (this process) and ``workers`` env processes over
    pipes, with no framework, learner or iteration barrier. In lockstep every step takes all
    observations in and sends one action batch out: what a per-step exchange with a wait on
    the slowest env gives on this machine. ``on_arrival``: the actor answers whichever envs'
    observations are in (``multiprocessing.connection.wait``), each with its own rows, as
    Fine acting on arrival does: what this machine gives an actor that never waits for the
    slowest env. Rate by wall clock (median of ``pairs``)."""
    import multiprocessing
    import time

    spawn = multiprocessing.get_context("spawn")
    rates, cores = [], []
    for _ in range(pairs):
        ends = [spawn.Pipe() for _ in range(workers)]
        procs = [
            spawn.Process(target=_lockstep_env, args=(child, latency_ms / 1e3, i)) for i, (_, child) in enumerate(ends)
        ]
        for proc in procs:
            proc.start()
        conns = [mine for mine, _ in ends]
        obs = [conn.recv() for conn in conns]  # every env built: start together
        obs = _lockstep_steps(conns, obs, 20)  # to warm up
        start, cpu = time.perf_counter(), time.process_time()
        (_answer_on_arrival if on_arrival else _lockstep_steps)(conns, obs, steps)
        wall = time.perf_counter() - start
        mine = time.process_time() - cpu
        for conn in conns:
            conn.send(None)
        theirs = sum(conn.recv() for conn in conns)  # warm-up steps included: scaled below
        for proc in procs:
            proc.join()
        rates.append(workers * steps * 16 / wall)
        cores.append((mine + theirs * steps / (20 + steps)) / wall)
    return {"rate": statistics.median(rates), "cores": statistics.median(cores), "driver_ms": float("nan")}


def _lockstep_steps(conns, obs: list, steps: int) -> list:
    """``steps`` lockstep steps of the exchange: every env's observations in, one action
    batch computed, each env sent its rows. Returns the last observations."""
    import numpy as np

    for _ in range(steps):
        action = (np.concatenate(obs)[:, 2] > 0.0).astype(np.int64)
        for i, conn in enumerate(conns):
            conn.send(action[i * 16 : (i + 1) * 16])
        obs = [conn.recv() for conn in conns]
    return obs


def _answer_on_arrival(conns, obs: list, steps: int) -> None:
    """Each env's next ``steps`` actions as its observations come in: a batch of whatever
    is in, one action computation, each env sent its rows. Returns once every env's last
    observation is back."""
    from multiprocessing.connection import wait

    import numpy as np

    index = {conn: i for i, conn in enumerate(conns)}
    sent = [0] * len(conns)
    current = dict(enumerate(obs))  # envs whose observations are in, not yet answered
    outstanding: set[int] = set()  # envs with an action out, their observations to come
    while True:
        live = [i for i in sorted(current) if sent[i] < steps]  # the rest took their last step
        if live:
            action = (np.concatenate([current[i] for i in live])[:, 2] > 0.0).astype(np.int64)
            for n, i in enumerate(live):
                conns[i].send(action[n * 16 : (n + 1) * 16])
                sent[i] += 1
                outstanding.add(i)
        current.clear()
        if not outstanding:
            return
        for conn in wait([conns[i] for i in outstanding]):
            i = index[conn]
            current[i] = conn.recv()
            outstanding.discard(i)


def _cpu_seconds(pids) -> float:
    """User + system CPU seconds of these processes so far (those still alive)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _measure(
    client, policy, iterations: int, worker_pids, latency_ms: float, **options
) -> tuple[float, int, float, float]:
    """One run (``options``: more of ``fdg.run``'s): (wall seconds, env steps, this
    process's CPU seconds, the workers' CPU seconds)."""
    import time

    cpu, workers_cpu, start = time.process_time(), _cpu_seconds(worker_pids), time.perf_counter()
    run = sleepy_fdg(latency_ms).run(
        iterations=iterations, steps=32, policy=policy, cluster=client, progress=False, **options
    )
    wall = time.perf_counter() - start
    if run.status != "finished":
        raise RuntimeError(f"the run ended {run.status}")
    return (wall, run.env_steps, time.process_time() - cpu, _cpu_seconds(worker_pids) - workers_cpu, actor_split(run))


#: what a replica's iteration is spent on, as the driver's rows give it (``time/NAME KIND_s``)
SPLIT = ("compute", "send", "wait", "other")
#: of the sending, the replica's thread's CPU time (the rest of a send waited: for the
#: GIL, for a core, for a socket's buffer)
SEND_CPU = "send_cpu"


def actor_split(run, skip: int = 3) -> dict[str, float]:
    """Milliseconds an iteration the replica that holds the actor spent on its cells, on
    sending, on waiting for values and on the rest (medians over the iterations after
    ``skip``): where a policy's step goes as the env replicas grow in number. Empty for a
    run whose rows carry no timing.

        >>> class Run: rows = [{"time/learner+actor[0] send_s": 0.002 * i} for i in range(6)]
        >>> actor_split(Run(), skip=1)
        {'send': 6.0}
    """
    rows = run.rows[skip:] or run.rows
    out = {}
    for kind in (*SPLIT, SEND_CPU):
        values = [
            v
            for r in rows
            for k, v in r.items()
            if k.startswith("time/") and "actor[0]" in k and k.endswith(f" {kind}_s")
        ]
        if values:
            out[kind] = round(statistics.median(values) * 1e3, 1)
    return out


def _steady(
    client, policy, worker_pids, latency_ms: float, pairs: int, short: int = 10, long: int = 40, **options
) -> dict[str, float]:
    """Medians over ``pairs`` pairs of runs, a short and a long one: the long run's extra
    iterations over the short one's, by wall clock. Deploy and teardown cancel out, and
    nothing hangs on when the driver happened to record a row (at 32 workers rows arrive
    in bursts, so rates from row times came out above the envs' own ceiling)."""
    _measure(client, policy, 3, worker_pids, latency_ms, **options)  # warm: imports, first connections
    rates, driver_ms, cores, splits = [], [], [], []
    for _ in range(pairs):
        a = _measure(client, policy, short, worker_pids, latency_ms, **options)
        b = _measure(client, policy, long, worker_pids, latency_ms, **options)
        wall, steps = b[0] - a[0], b[1] - a[1]
        rates.append(steps / wall)
        driver_ms.append((b[2] - a[2]) / (long - short) * 1e3)
        cores.append((b[2] + b[3] - a[2] - a[3]) / wall)
        splits.append(b[4])
    return {
        "rate": statistics.median(rates),
        "driver_ms": statistics.median(driver_ms),
        "cores": statistics.median(cores),
        "actor_ms": {
            k: statistics.median(s[k] for s in splits if k in s)
            for k in (*SPLIT, SEND_CPU)
            if any(k in s for s in splits)
        },
    }


def scaling(
    sizes: tuple[int, ...] = SIZES,
    latency_ms: float = 2.0,
    dask_defaults: bool = False,
    pairs: int = 3,
    policies: tuple[str, ...] = ("coarse", "fine"),
    bare: bool = True,
) -> None:
    """Weak scaling of the latency-bound env; a size or policy that fails is reported in
    the table (its error's first line), and the others still run."""
    import os

    import dask
    from distributed import Client, LocalCluster

    import workbench as wb
    from workbench.cluster.quiet_workers import QUIET_WORKER_CONFIG

    ceiling = 16 * 1e3 / latency_ms
    print(
        f"latency {latency_ms:g} ms per env step (one replica's ceiling {ceiling:,.0f} env-steps/s); "
        f"{'Dask default' if dask_defaults else 'lean (workbench.cluster.quiet_workers)'} worker settings; "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    names = {
        "coarse": "SingleLearnerCoarse",
        "fine": "SingleLearnerFine",
        "fine-arrival": "SingleLearnerFine, acting on arrival",
    }
    results: dict[str, dict[int, dict | str]] = {names[p]: {} for p in policies}
    controls = (
        {
            "bare processes (control)": _bare,
            "bare lockstep (control)": _exchange,
            "bare acting on arrival (control)": functools.partial(_exchange, on_arrival=True),
        }
        if bare
        else {}
    )
    if not {"fine", "fine-arrival"} & set(policies):
        controls.pop("bare lockstep (control)", None)
    if "fine-arrival" not in policies:
        controls.pop("bare acting on arrival (control)", None)
    for name in controls:
        results[name] = {}
    for workers in sizes:
        for name, control in controls.items():
            results[name][workers] = got = control(workers, latency_ms, pairs)
            print(
                f"  {name.split(' (')[0]} × {workers}: {got['rate']:,.0f} env-steps/s, {got['cores']:.2f} cores busy",
                flush=True,
            )
        with (
            dask.config.set({} if dask_defaults else QUIET_WORKER_CONFIG),
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(workers, timeout=300)
            worker_pids = list(client.run(os.getpid).values())
            chosen = {
                "coarse": wb.SingleLearnerCoarse(actors=workers),
                "fine": wb.SingleLearnerFine(envs=workers),
                "fine-arrival": wb.SingleLearnerFine(envs=workers),
            }
            for key, name, policy in ((p, names[p], chosen[p]) for p in policies):
                options = {"act_on_arrival": True} if key == "fine-arrival" else {}
                try:
                    results[name][workers] = got = _steady(client, policy, worker_pids, latency_ms, pairs, **options)
                    print(
                        f"  {name} × {workers} workers: {got['rate']:,.0f} env-steps/s, "
                        f"{got['cores']:.2f} cores busy, driver+scheduler {got['driver_ms']:.1f} ms CPU "
                        f"per iteration; the actor's replica, ms an iteration: {got['actor_ms']}; "
                        f"{_env_replicas_per_worker(client, policy)}",
                        flush=True,
                    )
                except Exception as exc:  # noqa: BLE001  (the table must still be printed)
                    results[name][workers] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
                    print(f"  {name} × {workers} workers: {results[name][workers]}", flush=True)
    print(_table(results, sizes))


def _env_replicas_per_worker(client, policy) -> str:
    """Where the env replicas went, as the most any one worker holds: replicas of one
    process take turns, so a worker with two steps them one after the other (Fine once
    put two on one worker at every size, and ran at 52 %)."""
    from collections import Counter

    plan = sleepy_fdg().plan(policy, cluster=client)
    env = next(g for g in plan.policy.groups if "env" in g.fragments)
    return f"at most {max(Counter(env.workers).values())} env replica(s) per worker"


def _table(results: dict[str, dict[int, dict | str]], sizes: tuple[int, ...]) -> str:
    """Per policy and size: env-steps/s, efficiency (throughput(W) / (W × throughput(1))),
    cores busy (the workers and this process) and the driver's CPU per iteration (this
    process: the driver, the in-process scheduler and the nannies)."""
    lines = ["\n| policy: measure \\ workers | " + " | ".join(map(str, sizes)) + " |", "|---|" + "---|" * len(sizes)]
    for name, by in results.items():
        ok = {w: v for w, v in by.items() if isinstance(v, dict)}
        base = ok[1]["rate"] if 1 in ok else None
        measures = [
            ("env-steps/s", lambda w: f"{ok[w]['rate']:,.0f}"),
            ("efficiency", lambda w: f"{ok[w]['rate'] / (w * base):.0%}" if base else "—"),
            ("cores busy", lambda w: f"{ok[w]['cores']:.2f}"),
            ("driver ms CPU / iteration", lambda w: f"{ok[w]['driver_ms']:.1f}"),
            (
                "actor's replica, ms an iteration: " + " / ".join(SPLIT),
                lambda w: (
                    " / ".join(f"{ok[w]['actor_ms'][k]:.1f}" for k in SPLIT)
                    if all(k in ok[w].get("actor_ms", {}) for k in SPLIT)
                    else "—"
                ),
            ),
            (
                "actor's sends, ms of its thread's CPU an iteration",
                lambda w: f"{ok[w]['actor_ms'][SEND_CPU]:.1f}" if SEND_CPU in ok[w].get("actor_ms", {}) else "—",
            ),
        ]
        if name.startswith("bare"):
            measures = measures[:3]  # no driver
        for label, cell in measures:
            cells = [cell(w) if w in ok else str(by.get(w) or "—") for w in sizes]
            lines.append(f"| {name}: {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--presets", action="store_true", help="part 1 only")
    parser.add_argument("--scaling", action="store_true", help="part 2 only")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(SIZES), help="workers per scaling step (default: %(default)s)"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=2.0, help="how long each env step waits (default: %(default)s)"
    )
    parser.add_argument(
        "--dask-defaults",
        action="store_true",
        help="Dask's default worker settings, not workbench.cluster.quiet_workers's",
    )
    parser.add_argument(
        "--no-bare", action="store_true", help="skip the control rows (the loop in plain processes, no framework)"
    )
    parser.add_argument("--pairs", type=int, default=3, help="short/long run pairs per point (median)")
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=["coarse", "fine", "fine-arrival"],
        default=["coarse", "fine", "fine-arrival"],
        help="which policies the scaling part runs (fine-arrival: Fine with act_on_arrival=True; default: all)",
    )
    args = parser.parse_args()
    both = not (args.presets or args.scaling)
    if args.presets or both:
        from workbench.cluster.connect import embedded_cluster

        presets(embedded_cluster(quiet=True).client)
    if args.scaling or both:
        scaling(
            tuple(args.sizes), args.latency_ms, args.dask_defaults, args.pairs, tuple(args.policies), not args.no_bare
        )


if __name__ == "__main__":
    main()
