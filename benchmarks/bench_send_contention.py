"""What a send costs an actor whose process also receives: Fine's per-step exchange without the framework.

Fine's actor sends each env replica its actions over a socket, one write each, while a
thread of its process filed the observations that arrived (``FrameReader``'s thread). On the
H200 host a send cost ~59 µs acting on arrival against ~22 µs in lockstep (docs/gpu.md,
2026-11-27 16:07), and on this VM a patch timing the sends found more than half of each
acting-on-arrival send spent waiting, not working. This script asks whether that is the
two threads handing the GIL to each other, with nothing of workbench in the way: ``N`` env
processes each answer an action with an observation after a simulated 2 ms step; the actor
process answers observations with actions, in three ways:

- ``arrival/thread``: a reader thread files the observations; the actor acts on whatever
  has arrived and sends at once (Fine acting on arrival, as built);
- ``lockstep/thread``: the same reader thread; the actor waits for every observation of
  the step, then sends all (Fine lockstep, as built);
- ``arrival/own``: no reader thread; the actor's thread selects and reads the sockets
  itself, then sends (what workbench does since: ``workbench.runtime.transport.frame_reader``).

Per mode it prints the actor's sends per second of the run, and per send the wall time and
the actor thread's own CPU time (the gap is waiting), medians of ``--repeats`` runs.

    python -m benchmarks bench_send_contention                    # 8 and 16 envs, 4 s a run
    python -m benchmarks bench_send_contention --envs 32 --seconds 8
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import selectors
import statistics
import threading
import time
from multiprocessing.connection import Connection

import numpy as np

from benchmarks import harness

MODES = ("arrival/thread", "lockstep/thread", "arrival/own")


def env_process(conn: Connection, step_s: float) -> None:
    """An env replica: each action answered by an observation after ``step_s``."""
    obs = np.zeros((16, 4), dtype=np.float32)
    while True:
        message = conn.recv_bytes()
        if message == b"stop":
            return
        time.sleep(step_s)
        conn.send_bytes(pickle.dumps(("obs", obs), protocol=5))


class Inbox:
    """Observations filed by a reader thread, taken by the actor (one condition)."""

    def __init__(self) -> None:
        self.ready: list[int] = []
        self.cond = threading.Condition()

    def put(self, k: int) -> None:
        with self.cond:
            self.ready.append(k)
            self.cond.notify()

    def take(self, at_least: int) -> list[int]:
        with self.cond:
            while len(self.ready) < at_least:
                self.cond.wait()
            taken, self.ready = self.ready, []
            return taken


def reader(conns: list[Connection], inbox: Inbox, stop: threading.Event) -> None:
    selector = selectors.DefaultSelector()
    for k, conn in enumerate(conns):
        selector.register(conn.fileno(), selectors.EVENT_READ, k)
    while not stop.is_set():
        for key, _ in selector.select(timeout=0.1):
            pickle.loads(conns[key.data].recv_bytes())
            inbox.put(key.data)


def run(mode: str, envs: int, seconds: float, step_s: float) -> dict:
    pairs = [mp.Pipe() for _ in range(envs)]
    procs = [mp.Process(target=env_process, args=(child, step_s), daemon=True) for _, child in pairs]
    for p in procs:
        p.start()
    conns = [parent for parent, _ in pairs]
    actions = np.zeros((envs, 16), dtype=np.int64)
    inbox, stop = Inbox(), threading.Event()
    thread = None
    if mode.endswith("/thread"):
        thread = threading.Thread(target=reader, args=(conns, inbox, stop), daemon=True)
        thread.start()
    selector = selectors.DefaultSelector()
    if mode == "arrival/own":
        for k, conn in enumerate(conns):
            selector.register(conn.fileno(), selectors.EVENT_READ, k)
    sends, wall, cpu = 0, 0.0, 0.0

    def send(batch):
        nonlocal sends, wall, cpu
        for k in batch:
            w, c = time.perf_counter(), time.thread_time()
            conns[k].send_bytes(pickle.dumps(("action", sends, k, actions[k]), protocol=5))  # as a send pickles
            wall += time.perf_counter() - w
            cpu += time.thread_time() - c
            sends += 1

    send(range(envs))  # the first actions
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if mode == "arrival/own":
            batch = []
            for key, _ in selector.select():
                pickle.loads(conns[key.data].recv_bytes())
                batch.append(key.data)
        else:
            batch = inbox.take(envs if mode == "lockstep/thread" else 1)
        send(batch)
    elapsed = time.perf_counter() - started
    stop.set()
    if thread is not None:
        thread.join()
    for conn in conns:
        conn.send_bytes(b"stop")
    for p in procs:
        p.join(5)
    return {"sends_per_s": sends / elapsed, "wall_us": wall / sends * 1e6, "cpu_us": cpu / sends * 1e6}


def main() -> None:
    parser = harness.parser(__doc__, repeats=3)
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    options = parser.parse_args()
    print(f"{'envs':>5} {'mode':>16} {'sends/s':>9} {'send wall µs':>13} {'actor CPU µs':>13} {'waiting µs':>11}")
    for envs in options.envs:
        results = {mode: [] for mode in MODES}
        for _ in range(options.repeats):  # modes interleaved: a busy moment falls on all alike
            for mode in MODES:
                results[mode].append(run(mode, envs, options.seconds, options.step_ms / 1e3))
        for mode in MODES:
            med = {k: statistics.median(r[k] for r in results[mode]) for k in results[mode][0]}
            print(
                f"{envs:>5} {mode:>16} {med['sends_per_s']:>9,.0f} {med['wall_us']:>13.1f} {med['cpu_us']:>13.1f} "
                f"{med['wall_us'] - med['cpu_us']:>11.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
