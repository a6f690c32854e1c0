"""Reading a server's channel connections: from one thread of its own, or from the replica
thread that waits for what they bring.

One :class:`FrameReader` reads every plain connection of a channel server (``select``,
non-blocking reads) and hands each whole frame to ``on_frame(frame, conn)``; a connection
that ends (the peer closed it, an error) goes to ``on_end(conn)``.

Why one thread, not one per connection: a single actor gathers one message from each of W
env replicas every step, and they arrive together. With a blocked reader thread per
connection every message woke a thread of its own, each taking the GIL in turn from the
others and from the actor (32 env replicas: ~60-100 µs of the actor's process per env
replica and step on a 16-core host).

Why the waiting replica reads, when it can (:meth:`FrameReader.pump`): even one reader
thread takes the GIL from the actor whenever a frame comes in while the actor computes or
sends, and an actor acting on arrival sends while observations come in. On the H200 host
a send cost it ~59 µs against ~22 µs in lockstep (32 workers), and without workbench a
reader thread beside such an actor made each send 7-17 µs dearer than the actor reading
its own sockets (``benchmarks/bench_send_contention.py``). So a replica thread that waits
in its :class:`~workbench.runtime.transport.mailbox.Mailbox` takes *the turn* and reads for
everyone in its process (frames for other replicas go to their mailboxes), and the
reader's own thread stays parked while waiters have read within :data:`LEND_S`: frames
that come in while the actor sends wait in the kernel until it next waits, and nobody
takes the GIL from it. The thread reads again after :data:`LEND_S` without a waiter
reading (a replica busy for long; bytes must not pile up until a sender blocks), and for
servers nobody waits on (the driver's).

    >>> import socket
    >>> from multiprocessing.connection import Connection
    >>> got, a, b = [], *socket.socketpair()
    >>> reader = FrameReader(lambda frame, conn: got.append(bytes(frame)), lambda conn: None)
    >>> reader.add(Connection(b.detach()))
    >>> sender = Connection(a.detach())
    >>> sender.send_bytes(b"obs"); sender.send_bytes(b"x" * 100_000)
    >>> import time; deadline = time.monotonic() + 10
    >>> while len(got) < 2 and time.monotonic() < deadline: time.sleep(0.01)
    >>> [len(f) for f in got]
    [3, 100000]
    >>> reader.close(); sender.close()
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["FrameReader", "StopReading", "READ_CHUNK", "LEND_S"]

#: how much a :class:`FrameReader` asks of a socket at once; a frame bigger than this is
#: read straight into a buffer of its own size
READ_CHUNK = 1 << 16
#: how long the reader's own thread stays parked after a waiting replica last read: longer
#: than an actor's compute and send between two waits (well under a millisecond a step),
#: short enough that a replica busy elsewhere leaves nothing unread for long
LEND_S = 0.02

_OWN = "the reader's own thread"  # the turn's holder when it is not a waiting replica


class StopReading(Exception):
    """Raised by an ``on_frame`` that wants no more frames from this connection."""


class _Stream:
    """One connection being read: the bytes of frames not yet whole, or the big frame being
    filled."""

    __slots__ = ("conn", "fd", "buffer", "big", "view", "got")

    def __init__(self, conn) -> None:
        self.conn, self.fd = conn, conn.fileno()
        self.buffer = bytearray()
        self.big: bytearray | None = None
        self.view: memoryview | None = None
        self.got = 0


class FrameReader:
    """Reads the frames of many plain connections as they come (see the module): whoever
    holds the turn — the reader's own thread, or a replica thread in :meth:`pump` — selects
    and reads; the others wait."""

    def __init__(self, on_frame: Callable, on_end: Callable, name: str = "workbench-channel-io") -> None:
        self._on_frame, self._on_end = on_frame, on_end
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._added: deque = deque()  # from other threads; registered by the turn's holder
        self._closed = False
        self._streams = 0
        # the turn: who may touch the selector and the streams now (None: nobody)
        self._state = threading.Lock()
        self._parked = threading.Condition(self._state)
        self._holder: object = None
        self._hand_back = False  # a waiter asked the reader's own thread for the turn
        self._standby: deque[Callable[[], None]] = deque()  # waiters to wake when the turn frees
        self._pumped_at = float("-inf")
        #: frames handed on, and how many of them by waiting replicas' threads
        self.frames = self.pumped_frames = 0
        #: wake-up bytes sent to a ``select`` in progress
        self.wakes = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    @property
    def streams(self) -> int:
        """How many connections it reads (or is about to)."""
        return self._streams

    def add(self, conn) -> None:
        """Read ``conn`` from now on (it passed its handshake; nothing else reads it)."""
        with self._state:
            self._streams += 1
        self._added.append(conn)
        self.wake()

    def close(self, timeout: float = 2.0) -> None:
        """Stop reading (the connections stay open: their owner closes them)."""
        with self._state:
            self._closed = True
            self._parked.notify_all()
        self.wake()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def pump(self, timeout: float, wake: Callable[[], None]) -> bool:
        """Read in the calling thread for up to ``timeout`` s (until something comes in),
        filing what comes; True if it did. False when another thread holds the turn: then
        ``wake`` is called when it frees, unless :meth:`leave` says it is not needed."""
        with self._state:
            if self._closed or not self._streams:
                return False
            mine = self._holder is None
            if mine:
                self._holder = threading.get_ident()
            else:
                if wake not in self._standby:
                    self._standby.append(wake)
                ask = self._holder is _OWN and not self._hand_back
                self._hand_back = self._hand_back or ask
        if not mine:
            if ask:
                self.wake()  # the reader's thread, in select, hands the turn over
            return False
        before = self.frames
        try:
            self._round(timeout)
        except (OSError, ValueError):  # the server closed the connections under it: it is stopping
            if not self._closed:
                raise
            return False
        finally:
            self.pumped_frames += self.frames - before
            with self._state:
                self._holder = None
                self._pumped_at = time.monotonic()
        return True

    def leave(self, wake: Callable[[], None]) -> None:
        """A waiter's wait is over: it needs no turn, and if the turn is free, the next
        waiter in line gets it (so a line of waiters never waits for a poll's timeout)."""
        with self._state:
            try:
                self._standby.remove(wake)
            except ValueError:
                pass
            nxt = self._standby.popleft() if self._holder is None and self._standby else None
        if nxt is not None:
            nxt()

    def wake(self) -> None:
        """Make a ``select`` in progress return: a connection added, a close, a waiter asking
        for the turn, or a waiter reading here whose value came by a local hand-over, which
        no socket announces."""
        try:
            self._wake_w.send(b"\0")
            self.wakes += 1
        except OSError:  # closed, or its buffer full of wake-ups already: awake anyway
            pass

    def wake_reader(self) -> None:
        """:meth:`wake` the thread reading, unless that is the calling thread: a frame it
        read and filed ends its own wait when the round ends (a wake-up would cost it a
        send, a drain and one more ``select``, per frame, on every replica's wait)."""
        if self._holder != threading.get_ident():  # the holder alone changes it from itself
            self.wake()

    def _run(self) -> None:
        try:
            while self._take_turn():
                try:
                    while not self._hand_back and not self._closed:
                        self._round(None)
                finally:
                    with self._state:
                        if self._hand_back:  # lent: parked as if the waiter had read already
                            self._pumped_at = time.monotonic()
                        self._holder, self._hand_back = None, False
                        nxt = self._standby.popleft() if self._standby else None
                    if nxt is not None:
                        nxt()
        finally:
            for key in list(self._selector.get_map().values()):
                self._selector.unregister(key.fileobj)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _take_turn(self) -> bool:
        """Park while waiters read or have lately; then hold the turn. False once closed
        (the turn held for good, so no waiter reads while the selector is torn down)."""
        with self._state:
            while True:
                if self._closed and self._holder is None:
                    self._holder = _OWN
                    return False
                quiet = time.monotonic() - self._pumped_at
                if not self._closed and self._holder is None and quiet >= LEND_S:
                    self._holder, self._hand_back = _OWN, bool(self._standby)
                    return True
                # no notify from the waiters' rounds (that would cost each a wake-up here):
                # this thread looks again when the quiet time could have run out
                self._parked.wait(LEND_S if self._holder is not None else LEND_S - quiet)

    def _round(self, timeout: float | None) -> None:
        """One ``select`` and the reads it allows."""
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                self._take_added()
            elif not self._pump(key.data):
                self._drop(key.data)

    def _take_added(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._added:
            conn = self._added.popleft()
            try:
                os.set_blocking(conn.fileno(), False)
                stream = _Stream(conn)
                self._selector.register(stream.fd, selectors.EVENT_READ, stream)
            except (OSError, ValueError):  # closed before it was read at all
                self._forget()
                self._on_end(conn)

    def _drop(self, stream: _Stream) -> None:
        try:
            self._selector.unregister(stream.fd)
        except (KeyError, ValueError, OSError):
            pass
        self._forget()
        self._on_end(stream.conn)

    def _forget(self) -> None:
        with self._state:  # (add counts from another thread)
            self._streams -= 1

    def _pump(self, s: _Stream) -> bool:
        """Read what ``s`` has now and hand on its whole frames; False when it ended."""
        while True:
            try:
                if s.big is not None:  # a big frame: its own buffer, read into directly
                    n = os.readv(s.fd, [s.view[s.got :]])
                    if n == 0:
                        return False
                    s.got += n
                    if s.got == len(s.big):
                        frame, s.big, s.view = s.big, None, None
                        if not self._hand_on(frame, s):
                            return False
                    continue
                data = os.read(s.fd, READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return True  # all read that there is
            except OSError:  # reset by the peer, or closed under us
                return False
            if not data:
                return False
            s.buffer += data
            if not self._split(s):
                return False
            if len(data) < READ_CHUNK and s.big is None:
                return True  # the socket had no more: spare the read that would say so

    def _split(self, s: _Stream) -> bool:
        """Hand on every whole frame in ``s.buffer``; start a big one's own buffer."""
        buffer, pos = s.buffer, 0
        with memoryview(buffer) as view:
            while len(buffer) - pos >= 4:
                (size,) = struct.unpack_from("!i", buffer, pos)
                head = 4
                if size == -1:  # past 2 GiB: an 8-byte length follows
                    if len(buffer) - pos < 12:
                        break
                    (size,) = struct.unpack_from("!Q", buffer, pos + 4)
                    head = 12
                start = pos + head
                if len(buffer) - start < size:
                    if size > READ_CHUNK:  # the rest straight into a buffer of its size
                        s.big = bytearray(size)
                        s.view = memoryview(s.big)
                        s.got = len(buffer) - start
                        s.view[: s.got] = view[start:]
                        pos = len(buffer)
                    break
                if not self._hand_on(view[start : start + size].tobytes(), s):
                    return False
                pos = start + size
        del buffer[:pos]
        return True

    def _hand_on(self, frame, s: _Stream) -> bool:
        self.frames += 1
        try:
            self._on_frame(frame, s.conn)
        except StopReading:
            return False
        except Exception:  # a bug in on_frame: this connection ends, the others go on
            logging.getLogger(__name__).exception("a channel frame could not be filed")
            return False
        return True
