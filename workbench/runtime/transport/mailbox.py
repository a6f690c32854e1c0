"""A replica's mailbox: the values other replicas sent it, and waits that wake only when done.

Filled by postmen (:mod:`workbench.runtime.transport.channels`: a local hand-over, or a channel
server's reader) and emptied by the replica's own thread, which, while it waits, reads the
server's connections itself when no other thread of its process is
(:mod:`workbench.runtime.transport.frame_reader`). A wait names everything it needs —
one value, or one per sending replica for a gather (:meth:`Mailbox.take_all`) — and its
thread is woken once, when the last of them is in, not at every arrival: a single actor
gathering observations from W env replicas each step was woken W times per step, each
time taking the GIL from the reader threads still filing the others.

Example:
    >>> box = Mailbox()
    >>> for sender in (1, 0):
    ...     box.put("obs", 7, sender, f"from {sender}")
    >>> box.take_all("obs", 7, (0, 1), stopped=lambda: False)
    ['from 0', 'from 1']
    >>> box.wakeups  # no thread waited: both values were in already
    0
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

__all__ = ["Mailbox", "Stopped", "Arrival"]


class Stopped(Exception):
    """The run is stopping: a blocked receive gives up."""


class Arrival(NamedTuple):
    """What a producer sends a consumer that takes values as they arrive (an asynchronous
    policy): the value its cell wrote, and the iteration it wrote it in, which the
    consumer's answer is accounted to. The envelope is the runtime's, never the user's:
    an error about the value names places inside ``value``, not inside this pair."""

    iteration: int | None
    value: Any


class _Wait:
    """One blocked receive: ``key`` at ``task`` from the replicas in ``missing`` (``task``
    None: the next arrival of ``key`` from anyone), with its own condition on the box's lock;
    ``reading``: the reader whose connections its thread reads now (a put then wakes its
    ``select``), else None."""

    __slots__ = ("key", "task", "missing", "cond", "reading", "turn")

    def __init__(self, key: str, task: int | None, missing: set[int], lock: threading.Lock) -> None:
        self.key, self.task, self.missing = key, task, missing
        self.cond = threading.Condition(lock)
        self.reading = None
        self.turn = False  # woken to read, not by a value (not a counted wake-up)

    def wake(self) -> None:
        """Wake its thread from another thread holding no mailbox lock (the reader's turn
        is free for it: :meth:`FrameReader.leave <workbench.runtime.transport.frame_reader.FrameReader.leave>`)."""
        with self.cond:
            self.turn = True
            self.cond.notify()


class Mailbox:
    """Inbound values of one replica: per (key, sending replica), the versions sent, by
    producer task. A value stays until a newer version of it is taken, because "latest
    value" interfaces read one emission many times."""

    def __init__(self, arrival_keys: tuple[str, ...] = ()) -> None:
        self._items: dict[tuple[str, int], dict[int, Any]] = {}
        # arrival order, kept only for keys an asynchronous consumer takes as they come
        self._arrivals: dict[str, deque[tuple[int, int]]] = {k: deque() for k in arrival_keys}
        self._lock = threading.Lock()
        self._waits: list[_Wait] = []
        #: why values can no longer arrive (a message that did not unpickle): raised by
        #: every wait, so the run fails with the cause instead of stalling
        self._failure: BaseException | None = None
        #: how many times a put or a failure woke a waiting thread (a gather of W values:
        #: once, however they interleave; the polls for the stop flag are not counted)
        self.wakeups = 0
        #: the :class:`~workbench.runtime.transport.frame_reader.FrameReader` of the channel server
        #: that files this box's values from other processes (set by the server): a wait
        #: reads its connections in its own thread when it can (see that module)
        self.reader = None

    def fail(self, error: BaseException) -> None:
        """Make every current and later wait raise ``error``."""
        with self._lock:
            self._failure = error
            for wait in self._waits:
                self._notify(wait)

    def put(self, key: str, task: int, replica: int, value: Any) -> None:
        with self._lock:
            self._items.setdefault((key, replica), {})[task] = value
            if key in self._arrivals:
                self._arrivals[key].append((task, replica))
            for wait in self._waits:
                if wait.key != key:
                    continue
                if wait.task is None:  # take_next: any arrival of its key
                    self._notify(wait)
                elif wait.task == task and replica in wait.missing:
                    wait.missing.discard(replica)
                    if not wait.missing:  # the last one it needed: wake it now, only now
                        self._notify(wait)

    def _notify(self, wait: _Wait) -> None:
        if wait.reading is not None:  # its thread is reading the channels: a local put wakes it
            wait.reading.wake_reader()
        else:
            wait.cond.notify()

    def _block(self, wait: _Wait, done: Callable[[], bool], stopped: Callable[[], bool], poll: float) -> None:
        """Wait (holding the lock) until ``done()``; the poll only checks the stop flag.
        Where a channel server's reader files this box's values, the waiting thread reads
        its connections itself when no other thread of the process does (the frames it
        files for other replicas go to their boxes): no thread to hand the GIL to."""
        reader = self.reader
        self._waits.append(wait)
        try:
            while not done():
                if self._failure is not None:
                    raise self._failure
                if stopped():
                    raise Stopped()
                if reader is not None and self._read(reader, wait, poll):
                    continue
                # the turn freed for it while it was asking: ask again, no wait; or what it
                # waits for was filed while it asked (by the turn's holder, who wakes no
                # one reading: the lock was free then)
                if wait.turn or done():
                    wait.turn = False
                    continue
                if wait.cond.wait(poll) and not wait.turn:  # a value's notify, not a poll's timeout
                    self.wakeups += 1
                wait.turn = False
        finally:
            self._waits.remove(wait)
            if reader is not None:  # outside this box's lock: it may wake another box's waiter
                self._lock.release()
                try:
                    reader.leave(wait.wake)
                finally:
                    self._lock.acquire()

    def _read(self, reader, wait: _Wait, poll: float) -> bool:
        """One round of reading the channels in this thread (the lock released meanwhile,
        since what it files may be for this box); False if another thread has the turn."""
        wait.reading = reader
        self._lock.release()
        try:
            return reader.pump(poll, wait.wake)
        finally:
            self._lock.acquire()
            wait.reading = None

    def take_next(self, key: str, stopped: Callable[[], bool], poll: float = 0.05) -> tuple[int, int, Any]:
        """The oldest unclaimed value of ``key`` from any replica, as (task, replica, value):
        an as-they-arrive queue for asynchronous consumers."""
        with self._lock:
            queue = self._arrivals.setdefault(key, deque())
            self._block(_Wait(key, None, set(), self._lock), lambda: bool(queue), stopped, poll)
            while True:
                task, replica = queue.popleft()
                versions = self._items.get((key, replica), {})
                if task in versions:
                    return task, replica, versions.pop(task)
                if not queue:  # claimed already (a value read twice): wait for the next
                    self._block(_Wait(key, None, set(), self._lock), lambda: bool(queue), stopped, poll)

    def take(self, key: str, task: int, replica: int, stopped: Callable[[], bool], poll: float = 0.05) -> Any:
        """Wait for the version ``task`` of ``key`` from ``replica``; older versions are
        dropped. Raises :class:`Stopped` if the run stops first."""
        return self.take_all(key, task, (replica,), stopped, poll)[0]

    def take_all(
        self, key: str, task: int, replicas: Iterable[int], stopped: Callable[[], bool], poll: float = 0.05
    ) -> list[Any]:
        """The version ``task`` of ``key`` from each of ``replicas``, in their order, once
        all are in (older versions dropped); the waiting thread wakes once, when the last
        arrives. Raises :class:`Stopped` if the run stops first."""
        replicas = tuple(replicas)
        with self._lock:
            missing = {r for r in replicas if task not in self._items.get((key, r), ())}
            if missing:
                wait = _Wait(key, task, missing, self._lock)
                self._block(wait, lambda: not wait.missing, stopped, poll)
            out = []
            for replica in replicas:
                versions = self._items[(key, replica)]
                for old in [t for t in versions if t < task]:
                    del versions[old]
                out.append(versions[task])
            return out

    def take_ready(
        self, key: str, wanted: dict[int, int], stopped: Callable[[], bool], poll: float = 0.05
    ) -> list[tuple[int, Any]]:
        """Every value of ``key`` that is in from the replicas of ``wanted`` (replica → the
        version it must send next), as ``(replica, value)`` in replica order, once at least
        one is (older versions dropped): a consumer that acts on what has arrived."""
        with self._lock:

            def ready() -> list[int]:
                return [r for r, task in wanted.items() if task in self._items.get((key, r), ())]

            if not ready():
                self._block(_Wait(key, None, set(), self._lock), lambda: bool(ready()), stopped, poll)
            out = []
            for replica in sorted(ready()):
                versions = self._items[(key, replica)]
                for old in [t for t in versions if t < wanted[replica]]:
                    del versions[old]
                out.append((replica, versions[wanted[replica]]))
            return out

    def __len__(self) -> int:
        return sum(len(v) for v in self._items.values())
