"""How channel bytes cross the network: length-prefixed frames over a plain or a TLS socket.

Replica channels (:mod:`workbench.runtime.channels`) speak ``multiprocessing.connection``'s
framing (a 4-byte big-endian length, or ``-1`` and an 8-byte length past 2 GiB) and its HMAC
handshake under the run's key. On a plain cluster the sockets are plain and carried by
``multiprocessing.connection.Connection``, unchanged. On a TLS cluster the same frames and
the same handshake go inside TLS, with the certificates the Dask cluster already has
(:class:`ChannelTLS`): TLS authenticates the cluster and hides the bytes, the run's key
still authenticates the run. ``Connection`` cannot read through an ``ssl.SSLSocket`` (it
calls ``os.read`` on the descriptor), hence :class:`FramedSocket`. On the receiving side,
one :class:`FrameReader` thread per server reads every plain connection past its handshake.

Why our own TLS sockets rather than Dask's comm layer (``distributed.comm`` speaks tls://
too): the channels are blocking sends and receives from replica threads, and Dask's comms
are asyncio coroutines with their own message framing; routing every per-step value
through the worker's event loop measured slower for small values and no faster for large
ones (``benchmarks/bench_tls.py --transport``; numbers in docs/security.md).

Example:
    >>> a, b = socket.socketpair()
    >>> left, right = FramedSocket(a), FramedSocket(b)
    >>> left.send_bytes(b"hello"); bytes(right.recv_bytes())
    b'hello'
    >>> left.close(); right.close()
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import ssl
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

__all__ = ["ChannelTLS", "FramedSocket", "FrameReader", "StopReading", "listen", "accept", "connect", "handshake",
           "no_delay"]

#: frames up to this size are sent together with their header (one TLS record, one
#: segment); larger ones after it, sparing a copy of a big payload (multiprocessing's rule)
_JOIN_BELOW = 16384


@dataclass(frozen=True)
class ChannelTLS:
    """The TLS contexts a process's channels use: ``server`` for the channel server it runs
    (a ``Purpose.CLIENT_AUTH`` context that requires the peer's certificate), ``client`` for
    its postmen. Dask's ``Security.get_listen_args(role)["ssl_context"]`` and
    ``get_connection_args(role)["ssl_context"]`` are such contexts."""

    server: ssl.SSLContext
    client: ssl.SSLContext


class FramedSocket:
    """``send_bytes``/``recv_bytes``/``fileno``/``close`` over any stream socket (a TLS one
    here), with ``multiprocessing.connection``'s framing, so its HMAC handshake
    (``deliver_challenge``/``answer_challenge``) works on it unchanged."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def handshake(self) -> None:
        """Finish the TLS handshake of an accepted socket (see :func:`accept`)."""
        self._sock.do_handshake()

    def send_bytes(self, buf) -> None:
        n = len(buf)
        header = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
        if n < _JOIN_BELOW:
            self._sock.sendall(header + bytes(buf))
        else:
            self._sock.sendall(header)
            self._sock.sendall(buf)

    def recv_bytes(self, maxlength: int | None = None) -> bytearray:
        size, = struct.unpack("!i", self._recv_exactly(4))
        if size == -1:
            size, = struct.unpack("!Q", self._recv_exactly(8))
        if maxlength is not None and size > maxlength:
            self.close()  # as Connection does: the stream is out of step now
            raise OSError("bad message length")
        return self._recv_exactly(size)

    def _recv_exactly(self, size: int) -> bytearray:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise EOFError("the peer closed the channel")
            got += n
        return buf

    def close(self) -> None:
        self._sock.close()


def listen(host: str, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host``, an ephemeral port (what ``Listener`` makes)."""
    return socket.create_server((host, 0), backlog=backlog)


def accept(listener: socket.socket, tls: ChannelTLS | None):
    """The next connection: a ``Connection`` (plain), or a :class:`FramedSocket` whose TLS
    handshake is left to :func:`handshake`, so a slow peer holds up only its own reader
    thread, not the accept loop."""
    sock, _ = listener.accept()
    no_delay(sock)  # the server answers the HMAC handshake: its frames must not wait either
    if tls is None:
        return Connection(sock.detach())
    try:
        return FramedSocket(tls.server.wrap_socket(sock, server_side=True, do_handshake_on_connect=False))
    except BaseException:
        sock.close()
        raise


def handshake(conn) -> None:
    """The server's half of the TLS handshake (nothing for a plain connection)."""
    if isinstance(conn, FramedSocket):
        conn.handshake()


def no_delay(sock: socket.socket) -> socket.socket:
    """Nagle off: channels send small frames back to back (a step's values, all-reduce
    chunks), and with Nagle on a frame sent while the previous one is unacknowledged waits
    for the receiver's delayed ACK, up to 40 ms on Linux. Measured with
    ``benchmarks/bench_allreduce.py --collective`` (8 replicas, the 37 KB PPO gradient):
    11.6 ms per chunked all-reduce with it, 27.6 ms without; ring 13.5 vs 124 ms."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def connect(address: tuple[str, int], tls: ChannelTLS | None):
    """A connection to a channel server (TLS if ``tls``), before the HMAC handshake."""
    if tls is None:
        sock = no_delay(socket.create_connection(address))
        return Connection(sock.detach())
    sock = no_delay(socket.create_connection(address))
    try:
        # Dask's contexts check the certificate's signature by the cluster's CA, not a host name
        return FramedSocket(tls.client.wrap_socket(sock, server_hostname=None))
    except BaseException:
        sock.close()
        raise


#: how much a :class:`FrameReader` asks of a socket at once; a frame bigger than this is
#: read straight into a buffer of its own size
READ_CHUNK = 1 << 16


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
    """One thread reading the frames of many plain connections as they come, handing each
    whole frame to ``on_frame(frame, conn)`` and each connection that ends (the peer closed
    it, an error) to ``on_end(conn)``.

    Why one thread, not one per connection: a single actor gathers one message from each
    of W env replicas every step, and they arrive together. With a blocked reader thread per
    connection, every message woke a thread of its own, each taking the GIL in turn from the
    others and from the actor (32 env replicas: ~60-100 µs of the actor's process per env
    replica and step on a 16-core host, the step 2× as long as with one env replica). One
    thread woken by ``select`` files every message that is in, one read per connection,
    then sleeps again. Descriptors are non-blocking here, so a big frame still arriving
    holds up no other connection.

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

    def __init__(self, on_frame: Callable, on_end: Callable, name: str = "workbench-channel-io") -> None:
        self._on_frame, self._on_end = on_frame, on_end
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._added: deque = deque()  # from other threads; registered by this one
        self._closed = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def add(self, conn) -> None:
        """Read ``conn`` from now on (it passed its handshake; nothing else reads it)."""
        self._added.append(conn)
        self._wake()

    def close(self, timeout: float = 2.0) -> None:
        """Stop reading (the connections stay open: their owner closes them)."""
        self._closed = True
        self._wake()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # closed, or its buffer full of wake-ups already: awake anyway
            pass

    def _run(self) -> None:
        try:
            while not self._closed:
                for key, _ in self._selector.select():
                    if key.data is None:
                        self._take_added()
                    elif not self._pump(key.data):
                        self._drop(key.data)
        finally:
            for key in list(self._selector.get_map().values()):
                self._selector.unregister(key.fileobj)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

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
                self._on_end(conn)

    def _drop(self, stream: _Stream) -> None:
        try:
            self._selector.unregister(stream.fd)
        except (KeyError, ValueError, OSError):
            pass
        self._on_end(stream.conn)

    def _pump(self, s: _Stream) -> bool:
        """Read what ``s`` has now and hand on its whole frames; False when it ended."""
        while True:
            try:
                if s.big is not None:  # a big frame: its own buffer, read into directly
                    n = os.readv(s.fd, [s.view[s.got:]])
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
                size, = struct.unpack_from("!i", buffer, pos)
                head = 4
                if size == -1:  # past 2 GiB: an 8-byte length follows
                    if len(buffer) - pos < 12:
                        break
                    size, = struct.unpack_from("!Q", buffer, pos + 4)
                    head = 12
                start = pos + head
                if len(buffer) - start < size:
                    if size > READ_CHUNK:  # the rest straight into a buffer of its size
                        s.big = bytearray(size)
                        s.view = memoryview(s.big)
                        s.got = len(buffer) - start
                        s.view[:s.got] = view[start:]
                        pos = len(buffer)
                    break
                if not self._hand_on(view[start:start + size].tobytes(), s):
                    return False
                pos = start + size
        del buffer[:pos]
        return True

    def _hand_on(self, frame, s: _Stream) -> bool:
        try:
            self._on_frame(frame, s.conn)
        except StopReading:
            return False
        except Exception:  # a bug in on_frame: this connection ends, the others go on
            logging.getLogger(__name__).exception("a channel frame could not be filed")
            return False
        return True


class StopReading(Exception):
    """Raised by an ``on_frame`` that wants no more frames from this connection."""
