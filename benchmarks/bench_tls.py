"""What encrypting the data plane costs: the same runs on a plain and a TLS cluster.

Two 2-worker LocalClusters on 127.0.0.1 run side by side in one process, identical but for
TLS (``Security.temporary()`` certificates): on the TLS one, replica channels and
snapshots go over TLS (``workbench.runtime.transport.wire``). Runs alternate plain/TLS, round after
round, so machine noise hits both alike; the tables give medians over the rounds.

- **quickstart**: the quickstart PPO FDG, coarse, a fixed number of iterations; env-steps/s
  (small values cross: a few KB of trajectories and the policy's weights per iteration,
  and the learner's snapshot to this process).
- **10 MB route**: each actor+env replica sends its learner a ~10 MB trajectory per
  iteration (10 steps of 1 MB, stacked); one of the two replicas is on the other worker,
  so ~10 MB crosses a channel per iteration (snapshots off); seconds per iteration, MB/s.
- **transport** (``--transport``): the transports alone, one process, sender and receiver
  threads: the channels' plain path, the channels' TLS path, and Dask's comms (``distributed.comm``)
  over tcp and tls driven from a thread, as replica loops would have to — the measurement
  behind choosing our own TLS sockets over Dask's comm layer.

    python -m benchmarks bench_tls                   # 5 rounds, quickstart + 10 MB route
    python -m benchmarks bench_tls --rounds 3 --transport
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import statistics
import threading
import time

from benchmarks import harness

MB = 1 << 20


# ---------------------------------------------------------------------------- runs on clusters
def _clusters():
    """(name, LocalCluster, Client) for a plain and a TLS cluster of 2 single-thread workers."""
    from distributed import Client, LocalCluster
    from distributed.security import Security

    made = []
    for name, security in (("plain", None), ("tls", Security.temporary())):
        kwargs = {"security": security} if security is not None else {}
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
            **kwargs,
        )
        made.append((name, cluster, Client(cluster, set_as_default=False, **kwargs)))
    return made


def _quickstart(client, iterations: int, seed: int) -> float:
    from workbench.algorithms import ppo

    cfg = ppo.PPOConfig(seed=seed)
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, policy="coarse", cluster=client, progress=False)
    return run.steps_per_second


ROUTE_STEPS = 10
ROUTE_ROW = MB  # bytes per step per replica


def _route_fdg():
    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"np": np, "wb": wb, "ROW": ROUTE_ROW // 4})
    fdg.add_fragment("env", "obs = np.zeros(1, np.float32)", rate="init")
    fdg.add_fragment("learner", "w = np.ones(1, np.float32)\nseen = 0.0", rate="init")
    fdg.add_fragment("actor", "gain = w", rate="init")
    fdg.add_fragment("actor", "action = obs + gain", rate="step")
    fdg.add_fragment("env", "obs = action * 0.5\ntraj = np.full(ROW, float(obs[0]), np.float32)", rate="step")
    fdg.add_fragment("learner", "seen += float(traj[0].sum())\nw = w * 0.5", rate="iteration")
    fdg.add_fragment("actor", "gain = w", rate="iteration")
    return fdg


def _route(client, iterations: int) -> float:
    """Seconds per iteration of the 10 MB route (after its first iteration: deploy and
    connection set-up are not per-iteration costs)."""
    run = _route_fdg().run(
        iterations=iterations + 1, steps=ROUTE_STEPS, policy="coarse", cluster=client, snapshot_every=0, progress=False
    )
    times = [row["time_s"] for row in run.rows]
    assert run.status == "finished" and len(times) == iterations + 1, run.summary()
    return (times[-1] - times[0]) / iterations


def _table(title: str, unit: str, results: dict[str, list[float]], better: str) -> None:
    print(f"\n{title}")
    print(f"| cluster | median {unit} | runs |")
    print("|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):,.3f} | {', '.join(f'{v:,.3f}' for v in values)} |")
    plain, tls = statistics.median(results["plain"]), statistics.median(results["tls"])
    print(f"tls / plain: {tls / plain:.3f}× ({better} is better)")


def bench_clusters(rounds: int, quick_iterations: int, route_iterations: int) -> None:
    made = _clusters()
    try:
        for _, _, client in made:  # warm up: imports, first deploys, TLS contexts
            _quickstart(client, 2, 0)
            _route(client, 1)
        quick: dict[str, list[float]] = {n: [] for n, _, _ in made}
        route: dict[str, list[float]] = {n: [] for n, _, _ in made}
        for r in range(rounds):
            for name, _, client in harness.rotated(made, r):  # each goes first in turn
                quick[name].append(_quickstart(client, quick_iterations, seed=r + 1))
                route[name].append(_route(client, route_iterations))
                print(
                    f"  round {r + 1} {name:5s}: quickstart {quick[name][-1]:,.0f} env-steps/s, "
                    f"10 MB route {route[name][-1] * 1000:,.1f} ms/iteration",
                    flush=True,
                )
        _table(f"quickstart, coarse, 2 workers, {quick_iterations} iterations", "env-steps/s", quick, "higher")
        crossing = ROUTE_STEPS * ROUTE_ROW / MB
        _table(f"route carrying {crossing:.0f} MB/iteration across workers", "s/iteration", route, "lower")
        for name, values in route.items():
            print(f"  {name}: {crossing / statistics.median(values):,.0f} MB/s through the route (compute included)")
    finally:
        for _, cluster, client in made:
            client.close()
            cluster.close()


# ---------------------------------------------------------------------------- transports alone
def _channel_transport(tls, size: int, count: int) -> float:
    """Seconds per message: ``count`` messages of ``size`` bytes, SocketPostman → SocketServer."""
    from workbench.runtime.transport.channels import Mailbox, SocketServer
    from workbench.runtime.transport.socket_postman import SocketPostman

    key, box = secrets.token_bytes(32), Mailbox()
    server = SocketServer(box, "127.0.0.1", key, tls)
    postman = SocketPostman({("x", 0): server.address}, key, tls=tls)
    payload = b"\x01" * size
    try:
        postman.send(("x", 0), "warm", 0, 0, payload)
        box.take("warm", 0, 0, stopped=lambda: False)
        started = time.perf_counter()
        for i in range(count):
            postman.send(("x", 0), "k", i, 0, payload)
        box.take("k", count - 1, 0, stopped=lambda: False)
        return (time.perf_counter() - started) / count
    finally:
        postman.close()
        server.close()


def _dask_transport(security, size: int, count: int) -> float:
    """Dask's comms, driven from a thread as a replica loop would (its writes hop onto the
    event loop's thread), the receiver a comm handler there."""
    import pickle

    from distributed.comm import connect, listen
    from distributed.protocol import to_serialize

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    got, done = [0], threading.Event()
    scheme = "tls" if security is not None else "tcp"
    listen_args = security.get_listen_args("worker") if security is not None else {}
    connect_args = security.get_connection_args("worker") if security is not None else {}

    async def handle(comm) -> None:
        while True:
            try:
                message = await comm.read()
            except Exception:
                return
            pickle.loads(message["value"])
            got[0] += 1
            if got[0] == count + 1:
                done.set()

    async def open_():
        listener = listen(f"{scheme}://127.0.0.1:0", handle, **listen_args)
        await listener.start()
        comm = await connect(listener.contact_address, **connect_args)
        return listener, comm

    listener, comm = asyncio.run_coroutine_threadsafe(open_(), loop).result()
    payload = b"\x01" * size

    def write(i: int) -> None:
        value = to_serialize(pickle.dumps(("k", i, 0, payload), protocol=5))
        asyncio.run_coroutine_threadsafe(comm.write({"value": value}), loop).result()

    write(-1)
    started = time.perf_counter()
    for i in range(count):
        write(i)
    done.wait()
    elapsed = time.perf_counter() - started

    async def close():
        await comm.close()
        listener.stop()

    asyncio.run_coroutine_threadsafe(close(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    return elapsed / count


def bench_transport(rounds: int) -> None:
    from distributed.security import Security

    from workbench.cluster.channel_security import channel_tls

    security = Security.temporary()
    tls = channel_tls(security, "worker", "the benchmark")
    contenders = {
        "channels, plain": lambda s, n: _channel_transport(None, s, n),
        "channels, TLS": lambda s, n: _channel_transport(tls, s, n),
        "dask comm, tcp": lambda s, n: _dask_transport(None, s, n),
        "dask comm, tls": lambda s, n: _dask_transport(security, s, n),
    }
    for size, count, unit in ((1024, 2000, "µs/message"), (10 * MB, 20, "ms/message")):
        results: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(rounds):
            for name in harness.rotated(list(contenders), r):
                results[name].append(contenders[name](size, count))
        scale = 1e6 if size < MB else 1e3
        print(f"\ntransport alone, {size:,}-byte messages, one-way stream of {count} (median of {rounds})")
        print(f"| transport | {unit} | MB/s |")
        print("|---|---|---|")
        for name, values in results.items():
            median = statistics.median(values)
            print(f"| {name} | {median * scale:,.1f} | {size / MB / median:,.0f} |")


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--quick-iterations", type=int, default=15, help="quickstart iterations per run (32 envs × 32 steps each)"
    )
    parser.add_argument("--route-iterations", type=int, default=10)
    parser.add_argument("--transport", action="store_true", help="also time the transports alone")
    parser.add_argument("--only-transport", action="store_true", help="only time the transports alone")
    args = parser.parse_args()
    if not args.only_transport:
        bench_clusters(args.rounds, args.quick_iterations, args.route_iterations)
    if args.transport or args.only_transport:
        bench_transport(args.rounds)


if __name__ == "__main__":
    main()
