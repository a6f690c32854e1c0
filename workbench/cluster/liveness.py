"""Finding workers that are alive but unreachable, within a stated bound.

Dask notices a dead worker process within a second or two (its comms break), but one that
is alive and unreachable — a link down, a partition, a process frozen by SIGSTOP or a
swap storm — only after its TCP timeout (30 s) or its TTL (minutes); meanwhile every
replica waiting for its values waits too. The driver therefore reads, once a second with
its look for dead workers, how long ago the scheduler last heard from each of the run's
workers (they heartbeat every half second). One unheard for a while is a suspect
(:class:`LossBound`): its replicas' channel server is probed — it must send its
authentication challenge, which only the live process does (the kernel answers the TCP
handshake of a frozen one) — and its nanny is asked whether the process runs and its CPU
time grows (:func:`computing`). A worker that neither answers nor computes is lost
(:func:`judged_lost`, pure); the run retires it and re-places its fragments. A worker
starved of the CPU (a hundred replicas' threads on two cores) can miss heartbeats and
probes for longer than any fixed patience, but its nanny sees it compute, so it is busy,
not lost. On a TLS cluster the probe speaks TLS first (the server's half of that
handshake, too, comes only from a live process).

A busy worker is not a stalled run either: when the run stays silent past its stall
deadline, :func:`loop_activity` reads each replica's progress on its worker — the steps its
step loop finished, and the CPU its loop's thread used — and the driver calls the run
stalled only if no replica stepped or computed (:mod:`workbench.runtime.stall`).

Example:
    >>> unanswered({"w1": ("127.0.0.1", 1)}, timeout=0.5)   # nothing listens on port 1
    ['w1']
"""
from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from distributed.core import rpc
from distributed.metrics import time as dask_time

from workbench.runtime.stall import thread_cpu_seconds

__all__ = ["PROBE_TIMEOUT_SECONDS", "LossBound", "answers", "unanswered", "suspects", "judged_lost", "unheard_for",
           "computing", "lost_among", "retire", "loop_activity", "env_step_counts"]

#: the longest a probed channel server is given to answer (LossBound gives less for a short bound)
PROBE_TIMEOUT_SECONDS = 5.0
def answers(address: tuple[str, int], timeout: float = PROBE_TIMEOUT_SECONDS, tls=None) -> bool:
    """Whether the channel server at ``address`` accepts a connection and sends its first
    bytes (the HMAC challenge) within ``timeout``; through TLS with ``tls`` (a
    :class:`~workbench.runtime.wire.ChannelTLS`, for a TLS run's channels). The probe then
    hangs up; the server drops a peer that does not finish the handshake."""
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(timeout)
            if tls is None:
                return bool(sock.recv(1))
            with tls.client.wrap_socket(sock, server_hostname=None) as secure:  # handshake: within timeout
                return bool(secure.recv(1))
    except OSError:  # refused, unreachable, timed out, a failed TLS handshake
        return False


def unanswered(servers: dict[str, tuple[str, int]], timeout: float = PROBE_TIMEOUT_SECONDS,
               tls=None) -> list[str]:
    """The keys of ``servers`` (worker → a channel server there) that do not answer; all
    probed at once, so the whole probe takes at most ``timeout``."""
    if not servers:
        return []
    with ThreadPoolExecutor(min(32, len(servers)), thread_name_prefix="workbench-probe") as pool:
        results = dict(zip(servers, pool.map(lambda a: answers(a, timeout, tls), servers.values())))
    return sorted(w for w, ok in results.items() if not ok)


@dataclass(frozen=True)
class LossBound:
    """How soon a worker that stops answering is called lost: within ``seconds`` of the last
    time the scheduler heard from it (run option ``lost_after``, 10 s by default).

    The driver looks at the workers' heartbeats once a second. A worker unheard for
    ``suspect_after`` (0.4 of the bound) is probed — its replicas' channel server must answer
    within ``probe_timeout`` (0.2) — while its nanny is asked, within ``nanny_timeout`` (0.3),
    whether its process runs and computes. So a decision comes at most 0.9 of the bound after
    the last heartbeat, plus the second between looks. Dask alone takes its TCP timeout (30 s)
    or its worker TTL (minutes).

    Example:
        >>> LossBound(10.0).suspect_after, LossBound(10.0).probe_timeout, LossBound(10.0).nanny_timeout
        (4.0, 2.0, 3.0)
    """

    seconds: float = 10.0

    @property
    def suspect_after(self) -> float:
        return 0.4 * self.seconds

    @property
    def probe_timeout(self) -> float:
        return min(PROBE_TIMEOUT_SECONDS, 0.2 * self.seconds)

    @property
    def nanny_timeout(self) -> float:
        return 0.3 * self.seconds


def suspects(unheard_for: dict[str, float | None], bound: LossBound) -> list[str]:
    """The workers to probe: unheard for ``bound.suspect_after`` or more, or no longer listed
    by the scheduler (``None``).

    Example:
        >>> suspects({"w1": 0.4, "w2": 4.5, "w3": None}, LossBound(10.0))
        ['w2', 'w3']
    """
    return sorted(w for w, s in unheard_for.items() if s is None or s >= bound.suspect_after)


def judged_lost(candidates: list[str], answered: set[str], computing: set[str]) -> list[str]:
    """Of the suspected workers, those lost: their channel server did not answer the probe
    and their nanny did not vouch that the process runs and computes. A worker starved of
    the CPU (a hundred replicas on two cores) can miss heartbeats and probes, yet its nanny
    sees it compute; a frozen process is stopped, a cut-off host's nanny does not answer.

    Example:
        >>> judged_lost(["w1", "w2", "w3"], answered={"w1"}, computing={"w2"})
        ['w3']
    """
    return [w for w in candidates if w not in answered and w not in computing]


def _unheard_for(dask_scheduler=None) -> dict[str, float]:
    """On the scheduler: each worker's seconds since it last heard from it (a heartbeat —
    every 0.5 s on a small cluster — or any message)."""
    now = dask_time()  # the clock the scheduler stamps last_seen with
    return {a: max(0.0, now - ws.last_seen) for a, ws in dask_scheduler.workers.items()}


def unheard_for(client, timeout: float) -> dict[str, float] | None:
    """Every worker's seconds since the scheduler last heard from it; None when the
    scheduler does not answer within ``timeout``."""
    try:
        return dict(client.run_on_scheduler(_unheard_for, callback_timeout=timeout))
    except Exception:  # the scheduler itself is unreachable (or slow): nothing to judge by
        return None


def lost_among(client, servers: dict[str, tuple[str, int]], bound: LossBound, tls=None) -> list[str]:
    """Of ``servers`` (suspected worker address → a channel server there), those lost by
    :func:`judged_lost`: the probe and the nannies are asked at once, so this takes at most
    ``bound.nanny_timeout`` (plus the nanny's CPU sample)."""
    if not servers:
        return []
    with ThreadPoolExecutor(1, thread_name_prefix="workbench-nanny") as pool:
        vouched = pool.submit(computing, client, list(servers), CPU_SAMPLE_SECONDS, bound.nanny_timeout)
        silent = set(unanswered(servers, timeout=bound.probe_timeout, tls=tls))
        busy = set(vouched.result())
    return judged_lost(sorted(servers), answered=set(servers) - silent, computing=busy)


#: how long a retired worker's nanny gets to kill its process (it asks first, then kills:
#: at most about twice this), and to be reached at all (a host whose link is down is not)
NANNY_KILL_TIMEOUT_SECONDS = 1.0
NANNY_REACH_TIMEOUT_SECONDS = 3.0
#: how long the worker process's CPU time is watched by its nanny (see :func:`computing`)
CPU_SAMPLE_SECONDS = 0.5


async def _worker_process_computes(sample_s: float, dask_worker=None) -> bool:
    """On a nanny: whether its worker process is running (not stopped by a signal, not a
    zombie) and used CPU time during ``sample_s`` seconds."""
    import psutil  # a dependency of distributed

    process = getattr(getattr(dask_worker, "process", None), "process", None)
    pid = getattr(process, "pid", None)
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        before = proc.cpu_times()
        await asyncio.sleep(sample_s)
        after = proc.cpu_times()
        status = proc.status()
    except psutil.Error:  # gone
        return False
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return False
    return (after.user + after.system) > (before.user + before.system)


async def _computing(addresses: list[str], sample_s: float, reach_s: float, dask_scheduler=None) -> list[str]:
    """On the scheduler: those of ``addresses`` whose nanny answers within ``reach_s`` (plus
    the sample) that their process is running and computing."""
    from distributed.protocol.pickle import dumps

    async def ask(address: str) -> bool:
        worker = dask_scheduler.workers.get(address)
        if worker is None or not worker.nanny:
            return False
        try:
            async with rpc(worker.nanny, connection_args=dask_scheduler.connection_args) as nanny:
                reply = await asyncio.wait_for(
                    nanny.run(function=dumps(_worker_process_computes), args=dumps((sample_s,)),
                              kwargs=dumps({})),
                    reach_s + sample_s)
        except Exception:  # unreachable with its worker (a link down), or too slow
            return False
        return reply.get("status") == "OK" and reply.get("result") is True

    answers = await asyncio.gather(*(ask(a) for a in addresses))
    return [a for a, busy in zip(addresses, answers) if busy]


def computing(client, addresses: list[str], sample_s: float = CPU_SAMPLE_SECONDS,
              reach_s: float = NANNY_REACH_TIMEOUT_SECONDS) -> list[str]:
    """Those of ``addresses`` that are busy, not lost, by their nannies' word: the worker
    process is neither stopped nor gone and its CPU time grows. A worker starved of the CPU
    (a hundred replicas' threads on two cores) can miss the probes and its heartbeats for
    longer than any fixed patience, yet it computes; a frozen process (SIGSTOP) is
    ``stopped``, and a cut-off host's nanny does not answer. Workers without a nanny are
    not vouched for."""
    try:
        return list(client.run_on_scheduler(_computing, list(addresses), sample_s, reach_s))
    except Exception:  # the scheduler is unreachable: nobody can vouch for them
        return []


async def _retire_workers(addresses: list[str], dask_scheduler=None) -> None:
    """On the scheduler: for each worker, ask its nanny to kill the process (a frozen
    process cannot refuse SIGKILL; the nanny then starts a fresh worker, as after a crash),
    then remove the worker if it is still listed, telling it to close."""
    stimulus = f"workbench-unreachable-{uuid.uuid4().hex[:8]}"

    async def retire_one(address: str) -> None:
        worker = dask_scheduler.workers.get(address)
        if worker is not None and worker.nanny:
            try:
                async with rpc(worker.nanny, connection_args=dask_scheduler.connection_args) as nanny:
                    await asyncio.wait_for(nanny.kill(reason="workbench: unreachable worker",
                                                      timeout=NANNY_KILL_TIMEOUT_SECONDS),
                                           NANNY_REACH_TIMEOUT_SECONDS)
            except Exception:  # unreachable with its worker, or slower than that: remove only
                pass
        if address in dask_scheduler.workers:
            # a killed process's comm may not have broken yet; an unreachable worker that
            # comes back is told to close (and, by Dask's rule, its nanny closes with it)
            await dask_scheduler.remove_worker(address, stimulus_id=stimulus, close=True)

    await asyncio.gather(*(retire_one(a) for a in addresses))


def retire(client, addresses: list[str]) -> None:
    """Take workers out of the run's cluster at once (no graceful retirement: they cannot
    answer), so a worker that comes back after a cut is not part of the run any more.

    Where a worker's nanny still answers (the worker process is frozen, or its event loop
    is stuck), the nanny kills the process and starts a fresh worker, which joins anew as a
    new worker; where it does not (the host is cut off), the worker is removed and told to
    close, and when it comes back it closes with its nanny: on your own hosts, restart that
    ``dask worker``."""
    client.run_on_scheduler(_retire_workers, list(addresses))



def _replicas_progress(run_id: str, loops: dict, plugin_name: str, dask_worker=None) -> dict:
    """On a worker: per replica of the run deployed there, (steps finished, CPU seconds of
    the thread running its loop task — found by the task's key among Dask's active threads,
    which a seceded long-running task stays in —, env steps its envs took in the run)."""
    plugin = dask_worker.plugins.get(plugin_name)
    if plugin is None:
        return {}
    threads = {t.ident: t for t in threading.enumerate()}
    cpu = {tuple(loops[key]): thread_cpu_seconds(threads.get(ident))
           for ident, key in dict(dask_worker.active_threads).items() if key in loops}
    return {f"{group}[{index}]": (item.replica.steps_done, cpu.get((group, index)),
                                  sum(item.replica.env_steps_taken.values()))
            for (run, group, index), item in list(plugin.deployed.items()) if run == run_id}


#: how long reading the replicas' progress may take: a worker whose event loop does not
#: answer (stuck, or vouched for by its nanny while starved) must not hold the driver, which
#: then judges the run by its silence alone (workbench.runtime.stall)
READ_TIMEOUT_SECONDS = 15.0


def _progress(client, run_id: str, loops: dict, workers: list[str], plugin_name: str,
              timeout: float = READ_TIMEOUT_SECONDS) -> dict:
    answers = client.run(_replicas_progress, run_id, loops, plugin_name, workers=workers, callback_timeout=timeout)
    merged: dict = {}
    for part in answers.values():
        merged.update(part)
    return merged


def loop_activity(client, run_id: str, loops: dict, workers: list[str], plugin_name: str = "workbench",
                  timeout: float = READ_TIMEOUT_SECONDS) -> dict:
    """Every replica's progress so far, ``"group[index]"`` → (steps finished, CPU seconds of
    its loop's thread or None), read on ``workers``; ``loops`` maps each loop task's key to
    its (group, index). Raises (a timeout) when a worker does not answer within ``timeout``."""
    return {label: (steps, cpu) for label, (steps, cpu, _) in
            _progress(client, run_id, loops, workers, plugin_name, timeout).items()}


def env_step_counts(client, run_id: str, workers: list[str], plugin_name: str = "workbench") -> dict[str, int]:
    """Each replica's own count of the env steps its envs took in the whole run,
    ``"group[index]"`` → steps (docs/counting.md), read on ``workers``."""
    return {label: taken for label, (_, _, taken) in _progress(client, run_id, {}, workers, plugin_name).items()}
