"""One thread reads every plain channel connection of a server (``frame_reader.FrameReader``).

Fine's single actor takes one observation from each of W env replicas every step, all
arriving together. With a reader thread per connection each message woke a thread of its
own, and W threads queued for the GIL in the actor's process; on a 16-core host Fine ran at
50 % of 32 × its 1-worker rate with a step twice as long as with one env replica. These
tests hold the mechanism (one thread files every connection's frames), and that frames of
every size, split anyhow by the network, arrive whole and in order.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from multiprocessing.connection import Connection

import numpy as np

from workbench.runtime.transport.channels import Mailbox, SocketServer
from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.transport.frame_reader import READ_CHUNK, FrameReader, StopReading

SIZES = [0, 1, 100, READ_CHUNK - 4, READ_CHUNK, READ_CHUNK + 1, 3 * READ_CHUNK + 7, 5_000_000]


def _pairs(n: int) -> list[tuple[Connection, Connection]]:
    pairs = []
    for _ in range(n):
        a, b = socket.socketpair()
        pairs.append((Connection(a.detach()), Connection(b.detach())))
    return pairs


def _wait_for(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_frames_of_every_size_from_many_connections_arrive_whole_in_order_on_one_thread():
    got: dict[int, list[bytes]] = {}
    threads_seen: set[str] = set()
    pairs = _pairs(6)
    ids = {id(theirs): i for i, (_, theirs) in enumerate(pairs)}

    def on_frame(frame, conn) -> None:
        threads_seen.add(threading.current_thread().name)
        got.setdefault(ids[id(conn)], []).append(bytes(frame))

    reader = FrameReader(on_frame, lambda conn: None)
    for _, theirs in pairs:
        reader.add(theirs)
    expected = {i: [bytes([i]) * size for size in SIZES] for i in range(len(pairs))}

    def send(i: int) -> None:
        for frame in expected[i]:
            pairs[i][0].send_bytes(frame)

    senders = [threading.Thread(target=send, args=(i,)) for i in range(len(pairs))]
    try:
        for t in senders:
            t.start()
        for t in senders:
            t.join(30)
        _wait_for(lambda: sum(map(len, got.values())) == len(pairs) * len(SIZES))
        assert got == expected
        assert threads_seen == {"workbench-channel-io"}  # one thread for every connection
    finally:
        reader.close()
        for mine, theirs in pairs:
            mine.close()
            theirs.close()


def test_a_frame_split_anyhow_by_the_network_arrives_whole():
    got = []
    a, b = socket.socketpair()
    reader = FrameReader(lambda frame, conn: got.append(bytes(frame)), lambda conn: None)
    reader.add(Connection(b.detach()))
    body = bytes(range(256)) * 1000  # 256,000 bytes: a big frame, read into its own buffer
    wire_bytes = len(body).to_bytes(4, "big") + body + (3).to_bytes(4, "big") + b"end"
    try:
        for cut in (2, 3, 50, 70_000, 255_999, len(wire_bytes) - 5):  # mid-header, mid-body…
            a.sendall(wire_bytes[:cut])
            time.sleep(0.02)  # let the reader see the part alone
            a.sendall(wire_bytes[cut:])
            _wait_for(lambda: len(got) == 2)
            assert got == [body, b"end"], f"cut at {cut}"
            got.clear()
    finally:
        reader.close()
        a.close()


def test_a_connection_that_ends_or_is_refused_goes_and_the_others_keep_being_read():
    got, ended = [], []
    pairs = _pairs(3)

    def on_frame(frame, conn) -> None:
        if frame == b"poison":
            raise StopReading()
        got.append(bytes(frame))

    reader = FrameReader(on_frame, ended.append)
    for _, theirs in pairs:
        reader.add(theirs)
    try:
        pairs[0][0].close()  # the peer hangs up
        pairs[1][0].send_bytes(b"poison")  # a frame the owner will not take
        _wait_for(lambda: len(ended) == 2)
        assert set(map(id, ended)) == {id(pairs[0][1]), id(pairs[1][1])}
        pairs[2][0].send_bytes(b"still here")
        _wait_for(lambda: got)
        assert got == [b"still here"]
    finally:
        reader.close()
        for mine, theirs in pairs:
            mine.close()
            theirs.close()


class _Recording(Mailbox):
    """A real mailbox that notes which thread filed each value."""

    def __init__(self) -> None:
        super().__init__()
        self.filed_by: set[str] = set()

    def put(self, key, task, replica, value) -> None:
        self.filed_by.add(threading.current_thread().name)
        super().put(key, task, replica, value)


def test_a_server_files_every_peer_s_values_on_its_one_reading_thread():
    """W env replicas' postmen, one step's observations each: one thread at a time files
    them all, whatever the number of connections (a reader thread per connection before)."""
    key, peers = secrets.token_bytes(32), 16
    box = _Recording()
    server = SocketServer(box, "127.0.0.1", key)
    postmen = [SocketPostman({("actor", 0): server.address}, key) for _ in range(peers)]
    try:
        for step in range(3):
            for i, postman in enumerate(postmen):
                postman.send(("actor", 0), "obs", step, i, np.full((16, 4), i, np.float32))
            values = box.take_all("obs", step, range(peers), stopped=lambda: False)
            assert [v[0, 0] for v in values] == list(range(peers))
        # the reader's thread, or the one waiting (tests/runtime/test_waiter_reads.py)
        assert box.filed_by <= {"workbench-channel-io", threading.current_thread().name}

        def handshaking() -> list:
            return [t for t in server._threads if t.name == "workbench-channel-read" and t.is_alive()]

        _wait_for(lambda: not handshaking())
        assert not handshaking()  # each ended once its connection was handed on
    finally:
        for postman in postmen:
            postman.close()
        server.close()
    assert not server._frames.thread.is_alive()
