"""Many replicas connecting to one channel server at once (every env replica's snapshot
reaching the driver as an iteration starts) all get through.

With multiprocessing's backlog of 1 and the HMAC handshake done inside ``accept``, a burst
of connections overflowed the accept queue; a connection the kernel dropped left its
sender waiting for a challenge forever (Fine at 8 workers stalled at iteration 0).
"""

from __future__ import annotations

import secrets
import threading
import time

from workbench.runtime.transport.channels import Mailbox, SocketServer, Stopped
from workbench.runtime.transport.socket_postman import SocketPostman

SENDERS = 48


def test_a_burst_of_senders_all_reach_one_server():
    key = secrets.token_bytes(32)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    start = threading.Barrier(SENDERS)
    postmen = [SocketPostman({("driver", 0): server.address}, key) for _ in range(SENDERS)]

    def send(i: int) -> None:
        start.wait()  # connect all at once, as replicas entering an iteration do
        postmen[i].send(("driver", 0), "snapshot:env", 1, i, b"x" * 1000)

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(SENDERS)]
    deadline = time.monotonic() + 20  # what arrives at all arrives in well under a second
    try:
        for t in threads:
            t.start()
        for i in range(SENDERS):
            try:
                got = box.take("snapshot:env", 1, i, stopped=lambda: time.monotonic() > deadline)
            except Stopped:
                raise AssertionError(f"sender {i}'s value never arrived") from None
            assert got == b"x" * 1000
    finally:
        # bounded: a regressed server can hang its own close on a stuck handshake
        def close_all() -> None:
            for postman in postmen:
                postman.close()
            server.close()

        closer = threading.Thread(target=close_all, daemon=True)
        closer.start()
        closer.join(5)


def test_a_peer_without_the_key_is_turned_away_and_the_server_keeps_serving():
    key = secrets.token_bytes(32)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    try:
        from multiprocessing import AuthenticationError

        try:
            SocketPostman({("x", 0): server.address}, secrets.token_bytes(32)).send(("x", 0), "k", 0, 0, 1)
            raised = False
        except (AuthenticationError, OSError, EOFError):
            raised = True
        assert raised
        assert_still_serves(server, box, key)
    finally:
        server.close()


def assert_still_serves(server: SocketServer, box: Mailbox, key: bytes, tls=None) -> None:
    """A peer with the run's key (and certificates) gets a value through."""
    good = SocketPostman({("x", 0): server.address}, key, tls=tls)
    good.send(("x", 0), "k", 0, 0, 42)
    assert box.take("k", 0, 0, stopped=lambda: False) == 42
    good.close()


def assert_dropped(server: SocketServer, timeout: float = 10) -> None:
    """The server kept no connection and no reader thread (waiting ``timeout`` for them to go)."""

    def readers() -> list:
        return [t for t in server._threads if t.name == "workbench-channel-read" and t.is_alive()]

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (server._conns or readers()):
        time.sleep(0.01)
    assert not server._conns and not readers()


def test_a_peer_silent_in_the_handshake_is_dropped_and_the_server_keeps_serving(monkeypatch):
    """A connection that never answers the challenge (a peer cut off mid-handshake, a port
    scanner) is closed after HANDSHAKE_TIMEOUT_S, not held for the server's life."""
    import socket

    from workbench.runtime.transport import channels

    monkeypatch.setattr(channels, "HANDSHAKE_TIMEOUT_S", 0.5)
    key = secrets.token_bytes(32)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    silent = socket.create_connection(server.address, timeout=10)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not server._conns:
            time.sleep(0.01)  # accepted
        assert server._conns
        silent.recv(4096)  # the challenge comes; no answer is sent
        # then the server gives up on it: the socket ends (EOF), its thread and entry go
        assert silent.recv(4096) == b""
        assert_dropped(server)
        assert_still_serves(server, box, key)
    finally:
        silent.close()
        server.close()
