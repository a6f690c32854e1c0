"""All-reduce cost: the channels' algorithms (all-to-all, scatter, ring) beside
torch.distributed's gloo, and MultiLearner at 2/4/8 under each.

Part 1 (``--collective``): N replica processes (spawned, one torch thread each), each with
its own mailbox, ``SocketServer`` and ``SocketPostman`` over localhost — the transport a
MultiLearner run uses between workers — and one gloo process group between them (a
``TCPStore`` hosted by replica 0, as ``allreduce="torch"`` forms it), average a float32
tensor by each way in turn: ``direct`` (every replica sends its whole value to every
other), ``scatter`` (reduce-scatter + all-gather in direct messages, the channels' default
for arrays ≥ 16 KB) or ``ring`` (the same around a ring), all forced through
``workbench.runtime.values.allreduce.allreduce``; ``gloo`` (``TorchGroup.allreduce``: what
``allreduce="torch"`` runs, the channels' bits) and ``gloo-native`` (gloo's own
``allreduce`` then ÷N: faster perhaps, but other bits — what the bit-identity costs).
Per N and size: bytes each replica sent per reduction (channels only: gloo's sockets are
not counted), and seconds per reduction (the slowest replica; median of the trials, which
interleave the ways).

Part 2 (``--multilearner``): the quickstart PPO under ``wb.MultiLearner(learners=N)`` on a
LocalCluster of N single-thread workers, with the channels' default (the 37 KB gradient in
chunks), the all-to-all forced in every worker, and ``allreduce="torch"`` (gloo): steady
env-steps/s and bytes on the channels per iteration.

    python -m benchmarks bench_allreduce                       # both parts, N = 2 4 8
    python -m benchmarks bench_allreduce --collective --counts 2 4 8 --trials 3
    python -m benchmarks bench_allreduce --multilearner --iterations 12

On a 2-core machine N processes share two cores, so the seconds measure CPU contention as
much as the network; the bytes are exact.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import secrets
import statistics
import time

from benchmarks import harness

#: float32 elements: 1 KB, 4 KB, 16 KB, the quickstart PPO gradient (36.6 KB), 128 KB, 1 MB, 10 MB
SIZES = (256, 1024, 4096, 9155, 32768, 262144, 2_621_440)
ALGORITHMS = ("direct", "scatter", "ring", "gloo", "gloo-native")
CHANNEL_ALGORITHMS = ALGORITHMS[:3]


def _repeats(size: int) -> int:
    """Reductions per trial: enough to time small values, few for 10 MB ones."""
    return max(3, min(50, 2_000_000 // (size * 4)))


def _nagle() -> None:
    """Put Nagle back on every socket this process connects (the channels' postmen), as
    the channels were before they set TCP_NODELAY (workbench.runtime.transport.wire.no_delay): for
    comparison only."""
    import socket

    from workbench.runtime.transport import wire

    wire.no_delay = lambda sock: sock
    connect = socket.create_connection

    def create_connection(*args, **kwargs):
        sock = connect(*args, **kwargs)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        return sock

    socket.create_connection = create_connection


def _replica(
    index: int,
    count: int,
    key: bytes,
    sizes,
    trials: int,
    addresses_out,
    addresses_in,
    barrier,
    results,
    nagle: bool = False,
) -> None:
    import numpy as np
    import torch

    from workbench.runtime.values import allreduce as collectives
    from workbench.runtime.transport.channels import Mailbox, SocketServer
    from workbench.runtime.transport.socket_postman import SocketPostman
    from workbench.runtime.transport.process_group import TorchGroup, host_store

    torch.set_num_threads(1)
    if nagle:
        _nagle()
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    store, port = host_store("127.0.0.1", count) if index == 0 else (None, None)
    addresses_out.put((index, server.address, port))
    told = addresses_in.recv()
    postman = SocketPostman(told["addresses"], key)
    group = TorchGroup.form("gloo", index, count, "127.0.0.1", "127.0.0.1", told["port"], "bench", store=store)
    reductions = itertools.count()

    def send(to: int, tag: int, value) -> None:
        postman.send(to, "allreduce", tag, index, value)

    def take(sender: int, tag: int):
        return box.take("allreduce", tag, sender, lambda: False)

    forced = {
        "direct": dict(chunked_min_bytes=1 << 62),
        "scatter": dict(chunked_min_bytes=0, chunked_min_replicas=2, algorithm="scatter"),
        "ring": dict(chunked_min_bytes=0, chunked_min_replicas=2, algorithm="ring"),
    }

    def by(algorithm: str, value):
        if algorithm == "gloo":
            return lambda: group.allreduce(value, lambda: False)
        if algorithm == "gloo-native":

            def native():
                out = value.clone()
                group.backend.allreduce([out]).wait()
                return out / count

            return native
        return lambda: collectives.allreduce(value, index, count, next(reductions), send, take, **forced[algorithm])

    try:
        for trial in range(trials):
            for size in sizes:
                value = torch.from_numpy(np.random.default_rng(index).standard_normal(size).astype(np.float32))
                shift = trial % len(ALGORITHMS)  # each way first in turn
                order = ALGORITHMS[shift:] + ALGORITHMS[:shift]
                for algorithm in order:
                    reduce = by(algorithm, value)
                    reduce()  # connections opened, pages touched
                    barrier.wait()
                    sent, start = postman.bytes_sent, time.perf_counter()
                    repeats = _repeats(size)
                    for _ in range(repeats):
                        reduce()
                    seconds = (time.perf_counter() - start) / repeats
                    results.put((algorithm, size, trial, index, seconds, (postman.bytes_sent - sent) / repeats))
        barrier.wait()  # nobody closes while another still sends
    finally:
        group.close()
        postman.close()
        server.close()


def collective(counts, sizes=SIZES, trials: int = 3, nagle: bool = False) -> list[dict]:
    """Part 1: one row per (N, size) with both algorithms' bytes and seconds."""
    ctx = mp.get_context("spawn")
    rows = []
    for count in counts:
        key = secrets.token_bytes(32)
        addresses_out, results, barrier = ctx.Queue(), ctx.Queue(), ctx.Barrier(count)
        pipes = [ctx.Pipe(duplex=False) for _ in range(count)]
        procs = [
            ctx.Process(
                target=_replica,
                args=(r, count, key, sizes, trials, addresses_out, pipes[r][0], barrier, results, nagle),
                daemon=True,
            )
            for r in range(count)
        ]
        for p in procs:
            p.start()
        said = [addresses_out.get(timeout=120) for _ in range(count)]
        addresses = {r: address for r, address, _ in said}
        port = next(p for r, _, p in said if r == 0)
        for _, sender in pipes:
            sender.send({"addresses": {r: addresses[r] for r in range(count)}, "port": port})
        expected = count * trials * len(sizes) * len(ALGORITHMS)
        got = [results.get(timeout=600) for _ in range(expected)]
        for p in procs:
            p.join(60)
        slowest: dict = {}
        for algorithm, size, trial, _, seconds, sent in got:
            entry = slowest.setdefault((algorithm, size, trial), [0.0, []])
            entry[0] = max(entry[0], seconds)
            entry[1].append(sent)
        for size in sizes:
            row = {"replicas": count, "size_bytes": size * 4}
            for algorithm in ALGORITHMS:
                row[f"{algorithm}_s"] = statistics.median(slowest[(algorithm, size, t)][0] for t in range(trials))
                row[f"{algorithm}_bytes"] = max(slowest[(algorithm, size, 0)][1])
            rows.append(row)
            print(
                f"N={count} {_kb(size * 4)}: " + ", ".join(f"{a} {row[a + '_s'] * 1e3:.2f} ms" for a in ALGORITHMS),
                flush=True,
            )
    print(
        "\n| N | value | "
        + " | ".join(f"bytes/replica {a}" for a in CHANNEL_ALGORITHMS)
        + " | "
        + " | ".join(f"ms/reduction {a}" for a in ALGORITHMS)
        + " |"
    )
    print("|---|---|" + "---|" * (len(CHANNEL_ALGORITHMS) + len(ALGORITHMS)))
    for r in rows:
        print(
            f"| {r['replicas']} | {_kb(r['size_bytes'])} | "
            + " | ".join(f"{r[a + '_bytes']:,.0f}" for a in CHANNEL_ALGORITHMS)
            + " | "
            + " | ".join(f"{r[a + '_s'] * 1e3:.2f}" for a in ALGORITHMS)
            + " |"
        )
    return rows


def _kb(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} KB"


def _force_direct(on: bool) -> None:
    """In a worker: make Peers use the all-to-all for every size (or restore the default)."""
    from workbench.runtime.values import allreduce as collectives
    from workbench.runtime.transport.channels import Peers

    Peers.chunked_min_bytes = 1 << 62 if on else collectives.CHUNKED_MIN_BYTES


def multilearner(counts, iterations: int = 12, skip: int = 4) -> None:
    """Part 2: MultiLearner PPO on N single-thread workers: the channels' default (the
    37 KB gradient in chunks, by scatter), the all-to-all, and gloo, alternated, twice each."""
    from distributed import Client, LocalCluster

    import workbench as wb
    from workbench.algorithms import ppo

    ways = [
        ("channels, chunked (default)", "channels", False),
        ("channels, all-to-all", "channels", True),
        ("torch.distributed (gloo)", "torch", False),
    ]
    print("\n| learners | all-reduce | env-steps/s (steady) | channel bytes / iteration | per learner per reduction |")
    print("|---|---|---|---|---|")
    for count in counts:
        with (
            LocalCluster(
                n_workers=count,
                threads_per_worker=1,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(count, timeout=300)
            for name, allreduce, direct in ways * 2:
                client.run(_force_direct, direct)
                cfg = ppo.PPOConfig()
                fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
                run = fdg.run(
                    iterations=iterations,
                    steps=cfg.num_steps,
                    policy=wb.MultiLearner(learners=count),
                    cluster=client,
                    progress=False,
                    allreduce=allreduce,
                )
                rate = harness.clock_rate(run, skip + 1)
                wire = statistics.median(r["wire/bytes"] for r in run.rows[skip:] or run.rows)
                reductions = cfg.update_epochs * cfg.num_minibatches
                print(
                    f"| {count} | {name} | {rate:,.0f} | {wire:,.0f} | {wire / reductions / count:,.0f} |", flush=True
                )


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--collective", action="store_true", help="part 1 only")
    parser.add_argument("--multilearner", action="store_true", help="part 2 only")
    parser.add_argument("--counts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="float32 elements")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument(
        "--nagle", action="store_true", help="part 1: Nagle back on (the channels set TCP_NODELAY), for comparison"
    )
    args = parser.parse_args()
    both = not (args.collective or args.multilearner)
    if args.collective or both:
        collective(args.counts, tuple(args.sizes), args.trials, args.nagle)
    if args.multilearner or both:
        multilearner(args.counts, args.iterations)


if __name__ == "__main__":
    main()
