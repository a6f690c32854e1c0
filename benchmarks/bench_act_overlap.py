"""Does acting overlap EnvPool's stepping? Three act+step loops on one env id, side by side.

    python -m benchmarks bench_act_overlap                          # HalfCheetah-v5, N 2 8 32
    python -m benchmarks bench_act_overlap --env CartPole-v1 --sizes 4 64

The loops, each acting with a 64-64 tanh torch policy (one torch thread, as workbench's runs
set) on every observation it gets, EnvPool with one C++ thread per pool:

- **one pool**: act on all N, ``send`` all N, ``recv`` all N (`EnvPoolVectorEnv.step`'s shape:
  the one-replica env fragment).
- **EnvPool async**: one pool, ``batch_size = N/2``, one Python thread: each ``recv`` returns
  the half that finished first, the policy acts on it and ``send``s it while the other half
  steps in C++ (EnvPool's own asynchronous loop; rows of a step hold different envs).
- **two replicas, turns**: two pools of N/2 in two threads that take workbench's turns
  (`workbench.runtime.state.randomness.GeneratorTurns`, as two actor+env replicas in one process do) and give
  the turn up while they wait in ``recv``, so one replica acts while the other's envs step:
  the design docs/envpool.md weighs for an async env fragment whose cells do not change.
- **two replicas, one thread**: the same two replicas and turns, run as two greenlets in one
  thread (``pip install greenlet``; the row is left out without it): after its ``send`` a
  replica switches to the other, which acts while the first one's envs step, with no OS
  thread handoff; what the runtime would do if it ran a worker's co-located replicas' step
  loops as lanes of one thread. ``--no-turns``: the same without turns (no stream swaps).

Also printed: how long a ``recv`` takes while another Python thread is busy (the GIL it must
take back). Every number is env-steps/s of the loop (N x steps / wall), median of repeats.
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import torch

from workbench.runtime.state.randomness import GeneratorTurns

from benchmarks import harness


def policy(obs_dim: int, act_dim: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(obs_dim, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, act_dim),
    )


def pool(env_id: str, num_envs: int, batch: int, seed: int):
    import envpool

    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch, seed=seed, num_threads=1)


def act_fn(env_id: str):
    """obs -> actions of the env's kind (continuous: the net's output; discrete: argmax)."""
    probe = pool(env_id, 1, 1, 0)
    space, obs_dim = probe.action_space, probe.observation_space.shape[0]
    probe.close()
    discrete = not hasattr(space, "low")
    net = policy(obs_dim, int(space.n) if discrete else space.shape[0])

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = net(torch.from_numpy(np.asarray(obs, np.float32))).numpy()
        return out.argmax(1).astype(np.int32) if discrete else out

    return act


def one_pool(env_id: str, n: int, steps: int, act) -> float:
    envs = pool(env_id, n, n, 0)
    ids = np.arange(n, dtype=np.int32)
    obs, _ = envs.reset()
    start = time.perf_counter()
    for _ in range(steps):
        envs.send(act(obs), ids)
        obs = envs.recv()[0]
    rate = n * steps / (time.perf_counter() - start)
    envs.close()
    return rate


def envpool_async(env_id: str, n: int, steps: int, act) -> float:
    half = max(1, n // 2)
    envs = pool(env_id, n, half, 0)
    envs.async_reset()
    start = time.perf_counter()
    for _ in range(steps * (n // half)):  # the same env steps as the other loops
        obs, *_, info = envs.recv()
        envs.send(act(obs), info["env_id"])
    for _ in range(n // half):  # what is still in flight
        envs.recv()
    rate = n * steps / (time.perf_counter() - start)
    envs.close()
    return rate


def two_replicas(env_id: str, n: int, steps: int, act) -> float:
    turns, half = GeneratorTurns(), max(1, n // 2)
    pools = [pool(env_id, half, half, seed) for seed in (0, 1)]
    never = lambda: False  # noqa: E731 - the run never stops here

    def replica(envs) -> None:
        streams, ids = turns.streams(), np.arange(half, dtype=np.int32)
        with turns.turn(streams, never):
            obs, _ = envs.reset()
        for _ in range(steps):
            with turns.turn(streams, never):
                envs.send(act(obs), ids)
                obs = turns.released(streams, envs.recv, never)()[0]

    threads = [threading.Thread(target=replica, args=(p,)) for p in pools]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = 2 * half * steps / (time.perf_counter() - start)
    for p in pools:
        p.close()
    return rate


def one_thread(env_id: str, n: int, steps: int, act, turns: bool = True) -> float:
    import greenlet

    half, never = max(1, n // 2), (lambda: False)  # noqa: E731 - the run never stops here
    pools = [pool(env_id, half, half, seed) for seed in (0, 1)]
    shared = GeneratorTurns() if turns else None
    lanes: list = []

    def replica(k: int) -> None:
        envs, ids = pools[k], np.arange(half, dtype=np.int32)
        streams = shared.streams() if shared else None
        take = (lambda: shared.take(streams, never)) if shared else (lambda: None)  # noqa: E731
        give = (lambda: shared.give(streams)) if shared else (lambda: None)  # noqa: E731
        take()
        obs, _ = envs.reset()
        give()
        for _ in range(steps):
            take()
            envs.send(act(obs), ids)
            give()
            if not lanes[1 - k].dead:  # the other acts while these envs step
                lanes[1 - k].switch()
            take()
            obs = envs.recv()[0]
            give()

    lanes[:] = [greenlet.greenlet(lambda k=k: replica(k)) for k in (0, 1)]
    start = time.perf_counter()
    while not all(lane.dead for lane in lanes):
        for lane in lanes:
            if not lane.dead:
                lane.switch()
    rate = 2 * half * steps / (time.perf_counter() - start)
    for p in pools:
        p.close()
    return rate


def pools_at_once(env_id: str, n: int, steps: int = 1000) -> tuple[float, float]:
    """env-steps/s without acting: one pool of N, and two pools of N/2 stepping at once (send,
    send, recv, recv): what two C++ threads give on this machine's cores."""
    one, two = pool(env_id, n, n, 0), [pool(env_id, n // 2, n // 2, s) for s in (0, 1)]
    rates = []
    for pools in ([one], two):
        ids = [np.arange(p.config["num_envs"], dtype=np.int32) for p in pools]
        actions = [np.asarray([p.action_space.sample()] * p.config["num_envs"]) for p in pools]
        for p in pools:
            p.reset()
        start = time.perf_counter()
        for _ in range(steps):
            for p, i, a in zip(pools, ids, actions):
                p.send(a, i)
            for p in pools:
                p.recv()
        rates.append(n * steps / (time.perf_counter() - start))
    for p in [one, *two]:
        p.close()
    return rates[0], rates[1]


def recv_beside_python(env_id: str, n: int, steps: int = 50) -> tuple[float, float]:
    """ms of a send+recv alone, and while another thread runs Python (the GIL to take back)."""
    envs = pool(env_id, n, n, 0)
    ids, action = np.arange(n, dtype=np.int32), np.asarray([envs.action_space.sample()] * n)
    envs.reset()

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            envs.send(action, ids)
            envs.recv()
        return (time.perf_counter() - start) / steps * 1e3

    alone = timed()
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    spinner.start()
    try:
        busy = timed()
    finally:
        stop.set()
        spinner.join()
    envs.close()
    return alone, busy


def main() -> None:
    parser = harness.parser(__doc__, repeats=3)
    parser.add_argument("--env", default="HalfCheetah-v5", help="an id EnvPool has")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32], help="N, total envs")
    parser.add_argument("--steps", type=int, default=1000, help="steps of each env per repeat")
    parser.add_argument("--no-turns", action="store_true", help="the one-thread row without turns too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    act = act_fn(args.env)
    loops = {"one pool": one_pool, "EnvPool async": envpool_async, "two replicas, turns": two_replicas}
    try:
        import greenlet  # noqa: F401
    except ImportError:
        print("(greenlet is not installed: no one-thread rows)")
    else:
        loops["two replicas, one thread"] = one_thread
        if args.no_turns:
            loops["one thread, no turns"] = lambda *a: one_thread(*a, turns=False)
    print(f"### {args.env}: act + step, env-steps/s (median of {args.repeats}; 1 C++ thread a pool)\n")
    print("| N | " + " | ".join(loops) + " |")
    print("|---:|" + "---:|" * len(loops))
    for n in args.sizes:
        rates = {name: [] for name in loops}
        for r in range(args.repeats):  # the loops of a repeat in a rotating order
            for name in harness.rotated(list(loops), r):
                rates[name].append(loops[name](args.env, n, args.steps, act))
        print(f"| {n} | " + " | ".join(f"{statistics.median(rates[k]):,.0f}" for k in loops) + " |", flush=True)
    for n in args.sizes:
        single, double = pools_at_once(args.env, n)
        print(
            f"\nno acting, N = {n}: one pool {single:,.0f} env-steps/s, two pools of N/2 at once {double:,.0f}", end=""
        )
    print()
    alone, busy = recv_beside_python(args.env, max(args.sizes))
    print(
        f"\nsend+recv of {max(args.sizes)} envs: {alone:.2f} ms alone, {busy:.2f} ms while another thread runs Python"
    )


if __name__ == "__main__":
    main()
