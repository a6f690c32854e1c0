"""What an actor's thread spends per observation with workbench's own channels, and how many
wake-up bytes its waits cost: Fine's exchange on the real ``SocketServer``,
``SocketPostman`` and ``Mailbox``, without the rest of a run.

``--envs`` env processes each answer an action with an observation (16 CartPole rows)
after a simulated 2 ms step; the actor (this process's main thread) takes observations
and sends actions, either as they come (``arrival``: ``Mailbox.take_ready``, Fine acting
on arrival) or a whole step at a time (``lockstep``: ``Mailbox.take_all``). Per mode it
prints the observations per second, the actor thread's CPU per observation (its read, its
send, its waits' own sleeping and waking) and the wake-up bytes its process's reader got
per observation (``FrameReader.wakes``). A waiting thread reads its own sockets
(``workbench.runtime.transport.frame_reader``); before 2026-12-01 each value it filed for itself
also sent it a wake-up byte, which it then drained in one more ``select``: one per
observation acting on arrival, one per step in lockstep.

    python -m benchmarks bench_waiter_wakes                  # 8 envs, 500 steps, both modes
    python -m benchmarks bench_waiter_wakes --envs 32 --steps 1000
"""

from __future__ import annotations

import multiprocessing as mp
import secrets
import time

import numpy as np

from benchmarks import harness

STEP_S = 0.002


def env_process(k: int, key: bytes, addresses, steps: int) -> None:
    """Env replica ``k``: its own server; each action answered after ``STEP_S``."""
    from workbench.runtime.transport.channels import SocketServer
    from workbench.runtime.transport.mailbox import Mailbox
    from workbench.runtime.transport.socket_postman import SocketPostman

    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key, routes={("env", k): box})
    addresses.put((k, server.address))
    actor = box.take("actor", 0, 0, stopped=lambda: False)
    postman = SocketPostman({("actor", 0): actor}, key)
    obs = np.zeros((16, 4), np.float32)
    postman.send(("actor", 0), "obs", 0, k, obs)
    for t in range(1, steps + 1):
        box.take("act", t, 0, stopped=lambda: False)
        time.sleep(STEP_S)
        postman.send(("actor", 0), "obs", t, k, obs)
    box.take("bye", 0, 0, stopped=lambda: False)
    postman.close()
    server.close()


def measure(envs: int, steps: int, mode: str, warm: int = 10) -> dict[str, float]:
    """One run: observations/s, the actor thread's CPU µs per observation, wake-ups per
    observation (the first ``warm`` steps left out of all three)."""
    from workbench.runtime.transport.channels import SocketServer
    from workbench.runtime.transport.mailbox import Mailbox
    from workbench.runtime.transport.socket_postman import SocketPostman

    key, ctx = secrets.token_bytes(32), mp.get_context("spawn")
    addresses = ctx.Queue()
    procs = [ctx.Process(target=env_process, args=(k, key, addresses, steps), daemon=True) for k in range(envs)]
    for p in procs:
        p.start()
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key, routes={("actor", 0): box})
    postman = SocketPostman(dict(((("env", k), a) for k, a in (addresses.get() for _ in range(envs)))), key)
    for k in range(envs):
        postman.send(("env", k), "actor", 0, 0, server.address)
    action, done = np.zeros(16, np.int64), dict.fromkeys(range(envs), 0)
    start = None
    while any(d <= steps for d in done.values()):
        wanted = {k: d for k, d in done.items() if d <= steps}
        if mode == "arrival":
            got = [k for k, _ in box.take_ready("obs", wanted, stopped=lambda: False)]
        else:
            box.take_all("obs", min(wanted.values()), wanted, stopped=lambda: False)
            got = list(wanted)
        if start is None and min(done.values()) >= warm:
            start = time.perf_counter(), time.thread_time(), server._frames.wakes, sum(done.values())
        for k in got:
            done[k] += 1
            if done[k] <= steps:
                postman.send(("env", k), "act", done[k], 0, action)
    wall, cpu = time.perf_counter() - start[0], time.thread_time() - start[1]
    frames, wakes = sum(done.values()) - start[3], server._frames.wakes - start[2]
    for k in range(envs):
        postman.send(("env", k), "bye", 0, 0, None)
    for p in procs:
        p.join(30)
    postman.close()
    server.close()
    return {"rate": frames / wall, "cpu_us": cpu / frames * 1e6, "wakes": wakes / frames}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--modes", nargs="+", default=["arrival", "lockstep"], choices=["arrival", "lockstep"])
    args = parser.parse_args()
    print("| mode | envs | observations/s | actor thread CPU µs / observation | wake-ups / observation |")
    print("|---|---:|---:|---:|---:|")
    for mode in args.modes:
        got = measure(args.envs, args.steps, mode)
        print(f"| {mode} | {args.envs} | {got['rate']:,.0f} | {got['cpu_us']:.1f} | {got['wakes']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
