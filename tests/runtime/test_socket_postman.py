"""One connection per process a postman sends to (workbench.runtime.transport.socket_postman).

Before, a postman opened a connection per target replica: SingleLearnerCoarse(actors=100)
on two workers opened ~5,000 at a run's start (every env replica announces its count to
every replica), each with a handshake thread and a timer on the receiving side, and a
worker starved for tens of seconds (CI). Now every replica of a process is reached through
one of its servers, route frames saying which mailbox the messages after them are for.
These tests use real sockets and servers."""

from __future__ import annotations

import secrets
import threading
import time

import numpy as np
import pytest

from workbench.cluster.deployed import gateways
from workbench.runtime.transport.channels import Mailbox, SocketServer
from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.transport.raw_frames import RAW_MIN_BYTES

REPLICAS = 40


def _take(box: Mailbox, key: str, task: int, sender: int):
    deadline = time.monotonic() + 10
    return box.take(key, task, sender, stopped=lambda: time.monotonic() > deadline)


@pytest.fixture()
def process():
    """``REPLICAS`` replicas of one 'process': each its own mailbox and server (as deployed),
    the servers sharing the map of mailboxes."""
    key = secrets.token_bytes(16)
    routes: dict = {}
    boxes = {("actor", i): Mailbox() for i in range(REPLICAS)}
    routes.update(boxes)
    servers = {t: SocketServer(box, "127.0.0.1", key, routes=routes) for t, box in boxes.items()}
    accepted = []
    for server in servers.values():  # count the connections each server accepts
        original = server._read

        def counting(conn, original=original):
            accepted.append(conn)
            return original(conn)

        server._read = counting
    yield key, boxes, servers, accepted
    for server in servers.values():
        server.close()


def test_every_replica_of_a_process_is_reached_over_one_connection(process):
    key, boxes, servers, accepted = process
    workers = {t: "w1" for t in boxes}
    addresses = gateways(workers, {t: s.address for t, s in servers.items()})
    assert len(set(addresses.values())) == 1
    postman = SocketPostman(addresses, key)
    try:
        for round_ in range(3):  # interleaved targets: each message lands in its own mailbox
            for group, index in boxes:
                postman.send((group, index), "obs", round_, 7, np.full(3, index * 10 + round_))
        assert postman.connections == 1
        for (group, index), box in boxes.items():
            for round_ in range(3):
                assert (_take(box, "obs", round_, 7) == index * 10 + round_).all()
        assert len(accepted) == 1
    finally:
        postman.close()


def test_a_big_byte_string_for_another_replica_is_filed_in_its_mailbox(process):
    key, boxes, servers, _ = process
    addresses = gateways({t: "w1" for t in boxes}, {t: s.address for t, s in servers.items()})
    postman = SocketPostman(addresses, key)
    big = bytes(range(256)) * (RAW_MIN_BYTES // 256 + 1)  # a frame of its own (raw_frames)
    try:
        postman.send(("actor", 5), "snapshot", 0, 0, big)
        postman.send(("actor", 6), "snapshot", 0, 0, b"small")
        postman.send(("actor", 5), "snapshot", 1, 0, b"after")
        assert bytes(_take(boxes[("actor", 5)], "snapshot", 0, 0)) == big
        assert _take(boxes[("actor", 6)], "snapshot", 0, 0) == b"small"
        assert _take(boxes[("actor", 5)], "snapshot", 1, 0) == b"after"
    finally:
        postman.close()


def test_many_senders_at_once_keep_each_targets_order(process):
    """Postmen of other replicas (threads here) sending to every replica at once: each
    (sender, target) keeps its order, and no message goes to the wrong mailbox."""
    key, boxes, servers, accepted = process
    addresses = gateways({t: "w1" for t in boxes}, {t: s.address for t, s in servers.items()})
    senders = 8

    def send_all(sender: int) -> None:
        postman = SocketPostman(addresses, key)
        for n in range(5):
            for target in boxes:
                postman.send(target, "seq", n, sender, (sender, target, n))
        postman.close()

    threads = [threading.Thread(target=send_all, args=(s,)) for s in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for target, box in boxes.items():
        for sender in range(senders):
            assert [_take(box, "seq", n, sender) for n in range(5)] == [(sender, target, n) for n in range(5)]
    assert len(accepted) == senders  # one connection per sender, not per sender and replica


def test_a_server_without_routes_files_everything_in_its_own_mailbox():
    """The driver's server and single-replica servers: a route frame for a replica they do
    not hold changes nothing."""
    key = secrets.token_bytes(16)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    postman = SocketPostman({("driver", 0): server.address}, key)
    try:
        postman.send(("driver", 0), "report", 0, 3, {"ok": 1})
        assert _take(box, "report", 0, 3) == {"ok": 1}
    finally:
        postman.close()
        server.close()


def test_gateways_pick_one_server_per_worker():
    workers = {("actor", 0): "w1", ("actor", 1): "w2", ("actor", 2): "w1", ("learner", 0): "w2"}
    addresses = {k: ("h", port) for port, k in enumerate(sorted(workers))}
    routed = gateways(workers, addresses)
    assert routed[("actor", 0)] == routed[("actor", 2)] == addresses[("actor", 0)]
    assert routed[("actor", 1)] == routed[("learner", 0)] == addresses[("actor", 1)]
