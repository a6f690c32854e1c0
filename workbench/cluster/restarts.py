"""Workers whose cell never returns: end their process now, let the next run wait for them.

A stop that finds a cell stuck (see ``STOP_GRACE_S`` in :mod:`workbench.runtime.engine.driver`)
cannot end that cell: Python cannot stop a thread. The worker's process has to go. Its
nanny ends it (:func:`end_workers`: about a second) and starts a fresh one as it does for
any worker that dies; that takes a worker's whole start-up (3–15 s measured on a busy
2-core machine, more with torch to import), so the stop does not wait for it. It only
waits for the scheduler to drop the old worker, so nothing can be placed on it, and notes
the restart here. The next run, before it reads the cluster's workers, waits for the
restarted ones to be back (:func:`wait_for_restarts`, saying so), so it places on as many
workers as before.

A ``LocalCluster`` closes the nanny of a worker not back within Dask's
``lost-worker-timeout`` (15 s): the embedded one is patient
(:mod:`workbench.cluster.restart_tolerant`).

Workers started without a nanny (``dask worker --no-nanny``, or threads of an in-process
``LocalCluster``) have nobody to restart them: the stop says so and what to do.
"""

from __future__ import annotations

import asyncio
import threading
import time

from distributed import Client

__all__ = [
    "end_workers",
    "wait_for_restarts",
    "wait_for_a_worker",
    "KILL_GRACE_S",
    "RESTART_WAIT_S",
    "NO_WORKERS_WAIT_S",
]

#: how long a stuck worker's process may take to close before its nanny kills it
KILL_GRACE_S = 1.0
#: how long a stop waits for the scheduler to drop the workers it ended
GONE_WAIT_S = 5.0
#: how long the next run waits for restarted workers to come back before it runs without
RESTART_WAIT_S = 120.0

#: how long a run waits for a cluster that has no worker at all to have one (a worker the
#: kernel killed for memory, restarting under its nanny; workers still joining)
NO_WORKERS_WAIT_S = 60.0

#: per scheduler address, the restarts under way: what a stop ended, for the next run
_pending: dict[str, "_Restart"] = {}
_lock = threading.Lock()


class _Restart:
    """Workers a stop ended: the server ids of their old processes (a restarted worker
    keeps its name but not its id), and how many workers the cluster had before."""

    def __init__(self, names: list[str], ids: set[str], count: int) -> None:
        self.names, self.ids, self.count = names, ids, count
        self.at = time.monotonic()


async def _end_worker_process(dask_worker=None) -> None:
    """On a worker's nanny (``dask_worker`` is the nanny here): end the worker process.
    The nanny then starts a fresh one, as it does for any worker whose process exits."""
    try:
        await dask_worker.kill(timeout=KILL_GRACE_S, reason="workbench: a cell never returned")
    except asyncio.TimeoutError:
        pass  # killed, not yet joined (a busy host): the nanny restarts it once it has exited


def _workers(dask_scheduler=None) -> dict[str, tuple[str, str, str | None]]:
    """address → (name, server id, nanny address or None), from the scheduler."""
    return {a: (str(w.name), w.server_id, w.nanny) for a, w in dask_scheduler.workers.items()}


def _key(client: Client) -> str:
    return str(getattr(client.scheduler, "address", None) or id(client))


def end_workers(client: Client, addresses: list[str], names: dict[str, str]) -> str:
    """End the processes of the workers at ``addresses`` (their nannies restart them) and
    return what to tell the user. Returns once the scheduler has dropped them (at most
    about ``GONE_WAIT_S`` later), not when their replacements are up."""
    listed = ", ".join(names.get(a, a) for a in addresses)
    try:
        before = client.run_on_scheduler(_workers)
    except Exception as exc:  # the scheduler is gone: nothing left to restart
        return f"could not reach the scheduler to restart worker {listed} ({exc})."
    here = [a for a in addresses if a in before]
    bare = [a for a in here if before[a][2] is None]
    ended = [a for a in here if a not in bare]
    said = []
    if ended:
        error = None
        try:
            client.run(_end_worker_process, workers=ended, nanny=True)
        except Exception as exc:  # an unreachable nanny; or a kill not joined in time (busy host)
            error = exc
        # judged by what the scheduler sees: a process killed but slow to be joined has gone
        # all the same (its nanny restarts it), one that is still listed has not
        left = _wait_until_gone(client, set(ended))
        restarted = [a for a in ended if a not in left]
        if restarted:
            with _lock:
                _pending[_key(client)] = _Restart(
                    [names.get(a, a) for a in restarted], {before[a][1] for a in restarted}, len(before)
                )
            said.append(
                f"restarting worker{'s' if len(restarted) > 1 else ''} "
                f"{', '.join(names.get(a, a) for a in restarted)} (a fresh process is "
                "starting; the next run waits for it)."
            )
        if left:
            why = f"{type(error).__name__}: {error}" if error else f"still there {GONE_WAIT_S:g} s later"
            said.append(
                f"could not restart worker {', '.join(names.get(a, a) for a in left)} through "
                f"its nanny ({why}); restart that dask worker process by hand, or the next run "
                "may be placed on it, beside the stuck cell."
            )
    gone = [a for a in addresses if a not in before]
    if gone:
        said.append(f"worker {', '.join(names.get(a, a) for a in gone)} has left the cluster already.")
    if bare:
        named = ", ".join(names.get(a, a) for a in bare)
        said.append(
            f"worker {named} has no nanny (started with `dask worker --no-nanny`, or a "
            "LocalCluster without processes), so it cannot be restarted from here: the cell "
            "goes on in one of its threads until it returns. Restart that dask worker "
            "process by hand (or start workers with a nanny) to end it."
        )
    return " ".join(said)


def _wait_until_gone(client: Client, addresses: set[str]) -> set[str]:
    """Wait (at most ``GONE_WAIT_S``) for the scheduler to drop ``addresses``; those it
    still lists."""
    deadline = time.monotonic() + GONE_WAIT_S
    while True:
        try:
            left = addresses & set(client.run_on_scheduler(_workers))
        except Exception:  # the scheduler is gone: so are they
            return set()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def wait_for_restarts(client: Client, timeout: float = RESTART_WAIT_S) -> None:
    """Before a run reads the cluster's workers: wait for workers a stop restarted (after
    a stuck cell) to be back, saying so, for at most ``timeout`` seconds."""
    with _lock:
        restart = _pending.pop(_key(client), None)
    if restart is None or time.monotonic() - restart.at > timeout or _back(client, restart):
        return  # (long ago: a cluster that lives at that address now has its own workers)
    names = f"worker{'s' if len(restart.names) > 1 else ''} {', '.join(restart.names)}"
    print(f"workbench: waiting for {names} to restart after a stuck cell…", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if _back(client, restart):
            return
    print(
        f"workbench: {names} not back {timeout:g} s after the restart; running on "
        "the workers there are (the cluster's logs say why it did not start).",
        flush=True,
    )


def _back(client: Client, restart: _Restart) -> bool:
    """Every ended process is gone and the cluster has as many workers as before."""
    try:
        now = client.run_on_scheduler(_workers)
    except Exception:  # the scheduler is gone: the run will say so itself
        return True
    return not restart.ids & {w[1] for w in now.values()} and len(now) >= restart.count


def wait_for_a_worker(client: Client, timeout: float = NO_WORKERS_WAIT_S) -> None:
    """Before a run reads the cluster's workers: if there are none (one that died — a worker
    the kernel killed for memory at the end of the last run — is restarting under its
    nanny; workers still joining a new scheduler), wait for one, saying so, for at most
    ``timeout`` seconds. Without a worker then, the placement says what is missing."""

    def count() -> int:
        try:
            return len(client.run_on_scheduler(_workers))
        except Exception:  # the scheduler is gone: the run will say so itself
            return 1

    if count():
        return
    print(
        f"workbench: the cluster has no worker now (one restarting after it died?); "
        f"waiting up to {timeout:g} s for one…",
        flush=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if count():
            return
