"""A process whose run left a thread behind still exits cleanly.

A stop gives a cell that does not return ``STOP_GRACE_S``; then its replica's thread is
told to end (an exception raised into it, :func:`workbench.runtime.engine.inline.reclaim`), and one
that does not (blocked outside Python, inside native code) is abandoned: it runs on until
its call returns, and every later run says so (:func:`abandoned`). If the process exits
while that thread is inside native code with the GIL released — a torch op — the thread,
coming back into Python during the interpreter's shutdown, is ended by ``pthread_exit``,
whose unwinding through torch's C++ frames calls ``std::terminate``: the process prints
``terminate called without an active exception`` and aborts (exit status 134) after the
run had ended. Found with PPO inline at 65,536 envs (issue 27): its learner update,
abandoned after a false stall, was still computing when ``workbench run`` returned.

So :func:`abandon` registers the thread, and at exit :func:`wait_for_abandoned` waits for
every abandoned thread that is still **computing** (its CPU clock advancing): it ends on
its own, and the process then shuts down normally, with its own exit status. A thread
that waits (a sleep, an event, a lock) uses no CPU and is not waited for: it does not
come back into Python in the moment the shutdown takes, and where it does, it unwinds
through C frames only. One still computing after :data:`EXIT_WAIT_S` (a cell in an
endless loop) — or a Ctrl-C during the wait — ends the process at once without the
interpreter's shutdown (output flushed; exit status 1, or 130 for the Ctrl-C): the one
way to end it without the abort.

Example:
    >>> import threading
    >>> done = threading.Event()
    >>> thread = threading.Thread(target=done.wait, daemon=True)
    >>> thread.start()
    >>> abandon(thread, "the learner iteration cell")
    >>> computing(thread, window=0.1)       # it waits: not computing, not waited for at exit
    False
    >>> done.set(); thread.join()
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from workbench.runtime.process.stall import BUSY_SHARE, thread_cpu_seconds

__all__ = ["abandon", "abandoned", "computing", "wait_for_abandoned", "EXIT_WAIT_S", "QUIET_ROUNDS"]

#: the longest the process waits at exit for an abandoned thread that keeps computing
EXIT_WAIT_S = 300.0
#: windows of 0.5 s in a row without computing before the exit lets a live thread be
QUIET_ROUNDS = 3

_lock = threading.Lock()
_abandoned: list[tuple[threading.Thread, str]] = []
_registered = False


def abandon(thread: threading.Thread, what: str) -> None:
    """Note that a run left ``thread`` (running ``what``) behind."""
    global _registered
    with _lock:
        _abandoned.append((thread, what))
        if not _registered:
            atexit.register(wait_for_abandoned)
            _registered = True


def abandoned() -> list[tuple[threading.Thread, str]]:
    """The abandoned threads still alive, with what each runs."""
    with _lock:
        _abandoned[:] = [(t, what) for t, what in _abandoned if t.is_alive()]
        return list(_abandoned)


def computing(thread: threading.Thread, window: float = 0.5) -> bool:
    """Whether ``thread`` uses the CPU (at least ``BUSY_SHARE`` of a core over ``window``
    seconds). Where its CPU clock cannot be read, a live thread counts as computing."""
    return bool(_computing([thread], window))


def _computing(threads: list[threading.Thread], window: float) -> list[threading.Thread]:
    """Those of ``threads`` that compute, judged over one common ``window``."""
    before = [thread_cpu_seconds(t) for t in threads]
    time.sleep(window)
    busy = []
    for thread, start in zip(threads, before):
        end = thread_cpu_seconds(thread)
        if thread.is_alive() if start is None or end is None else end - start >= BUSY_SHARE * window:
            busy.append(thread)
    return busy


def wait_for_abandoned(limit: float | None = None) -> None:
    """At exit: wait while an abandoned thread computes (up to ``limit``, default
    :data:`EXIT_WAIT_S`); past it, or on Ctrl-C, end the process without the shutdown.
    Threads are let be only after :data:`QUIET_ROUNDS` windows in a row without computing:
    one window of a thread starved on a busy machine must not pass for waiting."""
    limit = EXIT_WAIT_S if limit is None else limit
    deadline = time.monotonic() + limit
    said, quiet = False, 0
    try:
        while quiet < QUIET_ROUNDS:
            alive = abandoned()
            if not alive:
                return
            busy = _computing([t for t, _ in alive], 0.5)
            if not busy:
                quiet += 1
                continue
            quiet = 0
            if not said:
                said = True
                what = "; ".join(w for t, w in alive if t in busy)
                print(
                    f"workbench: waiting for {what} to return before this process exits (a thread inside "
                    "native code at exit aborts the process); Ctrl-C ends it now.",
                    file=sys.stderr,
                    flush=True,
                )
            if time.monotonic() > deadline:
                print(
                    f"workbench: still computing after {limit:g} s; ending the process without waiting.",
                    file=sys.stderr,
                    flush=True,
                )
                _end_now(1)
    except KeyboardInterrupt:
        _end_now(130)


def _end_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream has nothing left to say
            pass
    os._exit(status)
