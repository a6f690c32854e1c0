"""How channel bytes cross the network: length-prefixed frames over a plain or a TLS socket.

Replica channels (:mod:`workbench.runtime.transport.channels`) speak ``multiprocessing.connection``'s
framing (a 4-byte big-endian length, or ``-1`` and an 8-byte length past 2 GiB) and its HMAC
handshake under the run's key. On a plain cluster the sockets are plain and carried by
``multiprocessing.connection.Connection``, unchanged. On a TLS cluster the same frames and
the same handshake go inside TLS, with the certificates the Dask cluster already has
(:class:`ChannelTLS`): TLS authenticates the cluster and hides the bytes, the run's key
still authenticates the run. ``Connection`` cannot read through an ``ssl.SSLSocket`` (it
calls ``os.read`` on the descriptor), hence :class:`FramedSocket`. On the receiving side,
one :class:`~workbench.runtime.transport.frame_reader.FrameReader` per server reads every plain
connection past its handshake (:mod:`workbench.runtime.transport.channels` uses it).

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

import socket
import ssl
import struct
from dataclasses import dataclass
from multiprocessing.connection import Connection

__all__ = ["ChannelTLS", "FramedSocket", "listen", "accept", "connect", "handshake", "no_delay"]

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
        (size,) = struct.unpack("!i", self._recv_exactly(4))
        if size == -1:
            (size,) = struct.unpack("!Q", self._recv_exactly(8))
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
