"""Finding workers that are alive but unreachable, within a stated bound.

Dask notices a dead worker process within a second or two (its comms break), but one that
is alive and unreachable — a link down, a partition, a process frozen by SIGSTOP or a
swap storm — only after its TCP timeout (30 s) or its TTL (minutes); meanwhile every
replica waiting for its values waits too. The driver therefore reads, once a second with
its look for dead workers, how long ago the scheduler last heard from each of the run's
workers (they heartbeat every half second). One unheard for a while is a suspect
(:class:`LossBound`): its replicas' channel server is probed — it must send its
authentication challenge, which only the live process does (the kernel answers the TCP
handshake of a frozen one; a host cut off answers nothing) — and its nanny is asked whether
the process runs and its CPU time grows (:func:`process_states`). A worker that neither
answers nor computes, and is frozen, gone or cut off, is lost (:func:`judged_lost`, pure);
the run retires it and re-places its fragments. A worker
starved of the CPU (a hundred replicas' threads on two cores) can miss heartbeats and
probes for longer than any fixed patience, but its nanny sees it compute, so it is busy,
not lost. On a TLS cluster the probe speaks TLS first (the server's half of that
handshake, too, comes only from a live process).

A busy worker is not a stalled run either: when the run stays silent past its stall
deadline, :func:`loop_activity` reads each replica's progress on its worker — the steps its
step loop finished, and the CPU its loop's thread used — and the driver calls the run
stalled only if no replica stepped or computed (:mod:`workbench.runtime.process.stall`).

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

from workbench.runtime.process.stall import thread_cpu_seconds

__all__ = [
    "PROBE_TIMEOUT_SECONDS",
    "LossBound",
    "ANSWERED",
    "SILENT",
    "UNREACHABLE",
    "probe",
    "answers",
    "probe_all",
    "unanswered",
    "suspects",
    "judged_lost",
    "unheard_for",
    "process_states",
    "computing",
    "lost_among",
    "retire",
    "loop_activity",
    "env_step_counts",
]

#: the longest a probed channel server is given to answer (LossBound gives less for a short bound)
PROBE_TIMEOUT_SECONDS = 5.0
#: what a probe of a channel server found: its first bytes came (the live process sent them);
#: the host took the connection but no bytes came (a frozen, stuck or starved process); the
#: host did not take it at all (a link down, a host gone: the kernel answers the handshake of
#: any process there, frozen or not)
ANSWERED, SILENT, UNREACHABLE = "answered", "silent", "unreachable"


def probe(address: tuple[str, int], timeout: float = PROBE_TIMEOUT_SECONDS, tls=None) -> str:
    """:data:`ANSWERED` when the channel server at ``address`` accepts a connection and
    sends its first bytes (the HMAC challenge) within ``timeout``; :data:`SILENT` when the
    host takes the connection (or refuses it: nothing listens there any more) but no bytes
    come; :data:`UNREACHABLE` when the connection is not made at all. Through TLS with
    ``tls`` (a :class:`~workbench.runtime.transport.wire.ChannelTLS`, for a TLS run's channels). The
    probe then hangs up; the server drops a peer that does not finish the handshake."""
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except ConnectionRefusedError:
        return SILENT  # the host answered: its process is gone, not its link
    except OSError:  # timed out, no route: the host does not answer
        return UNREACHABLE
    try:
        with sock:
            sock.settimeout(timeout)
            if tls is None:
                return ANSWERED if sock.recv(1) else SILENT
            with tls.client.wrap_socket(sock, server_hostname=None) as secure:  # handshake: within timeout
                return ANSWERED if secure.recv(1) else SILENT
    except OSError:  # no bytes in time, a failed TLS handshake
        return SILENT


def answers(address: tuple[str, int], timeout: float = PROBE_TIMEOUT_SECONDS, tls=None) -> bool:
    """Whether the channel server at ``address`` sends its first bytes within ``timeout``."""
    return probe(address, timeout, tls) == ANSWERED


def probe_all(servers: dict[str, tuple[str, int]], timeout: float = PROBE_TIMEOUT_SECONDS, tls=None) -> dict[str, str]:
    """:func:`probe` of every one of ``servers`` (worker → a channel server there), all at
    once, so the whole probe takes at most ``timeout`` (twice, for a connection taken late)."""
    if not servers:
        return {}
    with ThreadPoolExecutor(min(32, len(servers)), thread_name_prefix="workbench-probe") as pool:
        return dict(zip(servers, pool.map(lambda a: probe(a, timeout, tls), servers.values())))


def unanswered(servers: dict[str, tuple[str, int]], timeout: float = PROBE_TIMEOUT_SECONDS, tls=None) -> list[str]:
    """The keys of ``servers`` (worker → a channel server there) that do not answer."""
    return sorted(w for w, found in probe_all(servers, timeout, tls).items() if found != ANSWERED)


@dataclass(frozen=True)
class LossBound:
    """How soon a worker that stops answering is called lost: within ``seconds`` of the last
    time the scheduler heard from it (run option ``lost_after``, 10 s by default).

    The driver looks at the workers' heartbeats once a second. A worker unheard for
    ``suspect_after`` (0.4 of the bound) is probed — its replicas' channel server must answer
    within ``probe_timeout`` (0.2) — while its nanny is asked, within ``nanny_timeout`` (0.3),
    whether its process runs and computes. A frozen process (its nanny says stopped) or a
    host cut off (neither it nor its nanny reachable) is so decided at most 0.9 of the bound
    after the last heartbeat, plus the second between looks; a process that answers nothing
    but whose host does (stuck, or starved on a loaded machine) only once unheard for the
    whole bound (:func:`judged_lost`). Dask alone takes its TCP timeout (30 s) or its worker
    TTL (minutes).

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


def judged_lost(
    candidates: list[str],
    probes: dict[str, str],
    processes: dict[str, str],
    unheard_for: dict[str, float | None],
    bound: LossBound,
) -> list[str]:
    """Of the suspected workers, those lost, from what the probe of their channel server
    found (:func:`probe`) and what their nanny says of their process (:func:`process_states`):

    - alive: the probe was answered, or the process computes (a worker starved of the CPU, a
      hundred replicas on two cores, misses heartbeats and probes, yet its CPU time grows);
    - lost at once: the process is stopped (SIGSTOP) or gone, or neither the worker nor its
      nanny could be reached at all (the host's link is down);
    - otherwise (the host answers, the process neither answers nor computes: stuck, or
      starved so that even its nanny answered late) lost only once unheard for the whole
      bound, so that a loaded machine's delays are not taken for a loss.

    Example:
        >>> b = LossBound(10.0)
        >>> judged_lost(["busy", "cut", "frozen", "idle"],
        ...             probes={"busy": SILENT, "cut": UNREACHABLE, "frozen": SILENT, "idle": SILENT},
        ...             processes={"busy": "computing", "cut": UNREACHABLE, "frozen": "stopped", "idle": "idle"},
        ...             unheard_for={"busy": 6.0, "cut": 5.0, "frozen": 5.0, "idle": 5.0}, bound=b)
        ['cut', 'frozen']
        >>> judged_lost(["idle"], {"idle": SILENT}, {"idle": "idle"}, {"idle": 10.5}, b)
        ['idle']
    """
    lost = []
    for worker in candidates:
        found, process = probes.get(worker, UNREACHABLE), processes.get(worker, UNREACHABLE)
        unheard = unheard_for.get(worker)
        if found == ANSWERED or process == "computing":
            continue
        if process in ("stopped", "gone") or (found == UNREACHABLE and process == UNREACHABLE):
            lost.append(worker)
        elif unheard is None or unheard >= bound.seconds:
            lost.append(worker)
    return lost


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


def lost_among(
    client, servers: dict[str, tuple[str, int]], unheard_for: dict[str, float | None], bound: LossBound, tls=None
) -> list[str]:
    """Of ``servers`` (suspected worker address → a channel server there), those lost by
    :func:`judged_lost`: the probe and the nannies are asked at once, so this takes at most
    ``bound.nanny_timeout`` (plus the nanny's CPU sample)."""
    if not servers:
        return []
    with ThreadPoolExecutor(1, thread_name_prefix="workbench-nanny") as pool:
        asked = pool.submit(process_states, client, list(servers), CPU_SAMPLE_SECONDS, bound.nanny_timeout)
        probes = probe_all(servers, timeout=bound.probe_timeout, tls=tls)
        processes = asked.result()
    return judged_lost(sorted(servers), probes, processes, unheard_for, bound)


#: how long a retired worker's nanny gets to kill its process (it asks first, then kills:
#: at most about twice this), and to be reached at all (a host whose link is down is not)
NANNY_KILL_TIMEOUT_SECONDS = 1.0
NANNY_REACH_TIMEOUT_SECONDS = 3.0
#: how long the worker process's CPU time is watched by its nanny (see :func:`computing`)
CPU_SAMPLE_SECONDS = 0.5


async def _worker_process_state(sample_s: float, dask_worker=None) -> str:
    """On a nanny: its worker process is ``"stopped"`` (by a signal), ``"gone"`` (no
    process, a zombie), ``"computing"`` (its CPU time grew during ``sample_s`` seconds) or
    ``"idle"``."""
    import psutil  # a dependency of distributed

    process = getattr(getattr(dask_worker, "process", None), "process", None)
    pid = getattr(process, "pid", None)
    if pid is None:
        return "gone"
    try:
        proc = psutil.Process(pid)
        before = proc.cpu_times()
        await asyncio.sleep(sample_s)
        after = proc.cpu_times()
        status = proc.status()
    except psutil.Error:  # gone
        return "gone"
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return "stopped"
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return "gone"
    return "computing" if (after.user + after.system) > (before.user + before.system) else "idle"


async def _process_states(addresses: list[str], sample_s: float, reach_s: float, dask_scheduler=None) -> dict[str, str]:
    """On the scheduler: what the nanny of each of ``addresses`` says of its worker process
    (:func:`_worker_process_state`), or :data:`UNREACHABLE` when it does not answer within
    ``reach_s`` (plus the sample) or the worker has no nanny."""
    from distributed.protocol.pickle import dumps

    async def ask(address: str) -> str:
        worker = dask_scheduler.workers.get(address)
        if worker is None or not worker.nanny:
            return UNREACHABLE
        try:
            async with rpc(worker.nanny, connection_args=dask_scheduler.connection_args) as nanny:
                reply = await asyncio.wait_for(
                    nanny.run(function=dumps(_worker_process_state), args=dumps((sample_s,)), kwargs=dumps({})),
                    reach_s + sample_s,
                )
        except Exception:  # unreachable with its worker (a link down), or too slow
            return UNREACHABLE
        return reply.get("result") if reply.get("status") == "OK" else UNREACHABLE

    answers = await asyncio.gather(*(ask(a) for a in addresses))
    return dict(zip(addresses, answers))


def process_states(
    client, addresses: list[str], sample_s: float = CPU_SAMPLE_SECONDS, reach_s: float = NANNY_REACH_TIMEOUT_SECONDS
) -> dict[str, str]:
    """What each of ``addresses``' nanny says of its worker process: ``"stopped"``,
    ``"gone"``, ``"computing"``, ``"idle"``, or :data:`UNREACHABLE` (the nanny did not
    answer: a host cut off, or none to ask)."""
    try:
        return dict(client.run_on_scheduler(_process_states, list(addresses), sample_s, reach_s))
    except Exception:  # the scheduler is unreachable: nobody can vouch for them
        return {a: UNREACHABLE for a in addresses}


def computing(
    client, addresses: list[str], sample_s: float = CPU_SAMPLE_SECONDS, reach_s: float = NANNY_REACH_TIMEOUT_SECONDS
) -> list[str]:
    """Those of ``addresses`` that are busy, not lost, by their nannies' word: the worker
    process is neither stopped nor gone and its CPU time grows."""
    return [a for a, state in process_states(client, addresses, sample_s, reach_s).items() if state == "computing"]


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
                    await asyncio.wait_for(
                        nanny.kill(reason="workbench: unreachable worker", timeout=NANNY_KILL_TIMEOUT_SECONDS),
                        NANNY_REACH_TIMEOUT_SECONDS,
                    )
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
    cpu = {
        tuple(loops[key]): thread_cpu_seconds(threads.get(ident))
        for ident, key in dict(dask_worker.active_threads).items()
        if key in loops
    }
    return {
        f"{group}[{index}]": (
            item.replica.steps_done,
            cpu.get((group, index)),
            sum(item.replica.env_steps_taken.values()),
        )
        for (run, group, index), item in list(plugin.deployed.items())
        if run == run_id
    }


#: how long reading the replicas' progress may take: a worker whose event loop does not
#: answer (stuck, or vouched for by its nanny while starved) must not hold the driver, which
#: then judges the run by its silence alone (workbench.runtime.process.stall)
READ_TIMEOUT_SECONDS = 15.0


def _progress(
    client, run_id: str, loops: dict, workers: list[str], plugin_name: str, timeout: float = READ_TIMEOUT_SECONDS
) -> dict:
    answers = client.run(_replicas_progress, run_id, loops, plugin_name, workers=workers, callback_timeout=timeout)
    merged: dict = {}
    for part in answers.values():
        merged.update(part)
    return merged


def loop_activity(
    client,
    run_id: str,
    loops: dict,
    workers: list[str],
    plugin_name: str = "workbench",
    timeout: float = READ_TIMEOUT_SECONDS,
) -> dict:
    """Every replica's progress so far, ``"group[index]"`` → (steps finished, CPU seconds of
    its loop's thread or None), read on ``workers``; ``loops`` maps each loop task's key to
    its (group, index). Raises (a timeout) when a worker does not answer within ``timeout``."""
    return {
        label: (steps, cpu)
        for label, (steps, cpu, _) in _progress(client, run_id, loops, workers, plugin_name, timeout).items()
    }


def env_step_counts(client, run_id: str, workers: list[str], plugin_name: str = "workbench") -> dict[str, int]:
    """Each replica's own count of the env steps its envs took in the whole run,
    ``"group[index]"`` → steps (docs/counting.md), read on ``workers``."""
    return {label: taken for label, (_, _, taken) in _progress(client, run_id, {}, workers, plugin_name).items()}
