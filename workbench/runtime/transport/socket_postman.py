"""The postman that sends to replicas in other processes: one connection per process.

A replica sends to every replica it has a route to (and, counting env steps, to every
replica of the run: ``GroupReplica._announce``). With a connection per target replica,
``SingleLearnerCoarse(actors=100)`` on two workers opened ~5,000 connections at the start
of a run, each with a handshake thread and a timer on the receiving side: a storm that
starved a worker of the CPU for tens of seconds on two cores. So every replica of a worker
gets the same address from the driver (one of its channel servers: the *gateway*), the
postman keeps one connection per address, and before the frames for a replica other than
the last one on that connection it sends a route frame naming it (:func:`route_frame`); the gateway
server files what follows into that replica's mailbox (``SocketServer``'s ``routes``).
Order is kept per sender and target (one connection, one reader), and a value sent to
several replicas of one process is still pickled once.

Example (two replicas behind one server):
    >>> from workbench.runtime.transport.channels import Mailbox, SocketServer
    >>> a, b = Mailbox(), Mailbox()
    >>> server = SocketServer(a, "127.0.0.1", b"key", routes={("actor", 0): a, ("actor", 1): b})
    >>> postman = SocketPostman({("actor", 0): server.address, ("actor", 1): server.address}, b"key")
    >>> postman.send(("actor", 1), "weights", 0, 0, [1.0])
    >>> postman.send(("actor", 0), "weights", 0, 0, [2.0])
    >>> b.take("weights", 0, 0, stopped=lambda: False), a.take("weights", 0, 0, stopped=lambda: False)
    ([1.0], [2.0])
    >>> postman.connections
    1
    >>> postman.close(); server.close()
"""

from __future__ import annotations

import pickle
import threading
from multiprocessing.connection import answer_challenge, deliver_challenge
from typing import Any

from workbench.runtime.transport import wire
from workbench.runtime.values.arrays import handed_over
from workbench.runtime.transport.channels import ROUTE, Address, Target, _close_quietly, dumps
from workbench.runtime.transport.raw_frames import split_raw

__all__ = ["route_frame", "SocketPostman"]


def route_frame(target: Target) -> bytes:
    """The frame that says the messages after it are for ``target``."""
    return pickle.dumps((ROUTE, target), protocol=5)


class SocketPostman:
    """Sends to replicas in other processes; in-process targets get the local fast path."""

    def __init__(
        self,
        addresses: dict[Target, Address],
        authkey: bytes,
        local: dict | None = None,
        tls: wire.ChannelTLS | None = None,
    ) -> None:
        self.addresses = addresses
        self.authkey = authkey
        self.tls = tls
        self.local = local or {}
        self._conns: dict[Address, Any] = {}
        self._routed: dict[Address, Target] = {}  # the target each connection now files into
        self._route_frames: dict[Target, bytes] = {}
        self._lock = threading.Lock()
        self._last_payload: tuple | None = None
        self.bytes_sent = 0

    @property
    def connections(self) -> int:
        """How many connections this postman holds (one per process it has sent to)."""
        return len(self._conns)

    def send(self, target: Target, key: str, task: int, replica: int, value: Any) -> None:
        box = self.local.get(target)
        if box is not None:  # in this process: a copy, as LocalPostman gives
            box.put(key, task, replica, handed_over(value))
            return
        # one value often goes to several replicas (a broadcast): serialise it once
        cached = self._last_payload
        message, raw = split_raw(key, task, replica, value)  # a big byte string: a frame of its own
        if cached is not None and cached[0] is value and cached[1] == (key, task, replica):
            payload = cached[2]
        else:
            try:
                payload = dumps(message)
            except Exception as exc:  # a lock, a lambda, a generator on a route: name it
                from workbench.runtime.transport.serialisable import value_error

                raise value_error(key, value, exc) from None
            # (not a raw one's: its header costs nothing, and the cache would hold its GBs)
            self._last_payload = (value, (key, task, replica), payload) if raw is None else None
        address = self.addresses[target]
        with self._lock:
            conn = self._conns.get(address)
            if conn is None:
                conn = self._conns[address] = self._connect(address)
            if self._routed.get(address) != target:
                route = self._route_frames.get(target)
                if route is None:
                    route = self._route_frames[target] = route_frame(target)
                conn.send_bytes(route)
                self._routed[address] = target
                self.bytes_sent += len(route)
            conn.send_bytes(payload)
            if raw is not None:
                conn.send_bytes(raw)
            self.bytes_sent += len(payload) + (len(raw) if raw is not None else 0)

    def _connect(self, address: Address):
        """A connection that passed the HMAC handshake (what ``multiprocessing``'s
        ``Client(address, authkey=…)`` does, over TLS when the run's channels use it)."""
        conn = wire.connect(address, self.tls)
        try:
            answer_challenge(conn, self.authkey)
            deliver_challenge(conn, self.authkey)
        except BaseException:
            _close_quietly(conn)
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            self._routed.clear()
