"""A replica thread waiting in its mailbox reads the channels itself (``FrameReader.pump``).

Fine's actor, acting on arrival, sends while observations come in; a reader thread filing
them took the GIL from it at every send (~59 µs a send against ~22 in lockstep at 32
workers on the H200 host). Now the waiting thread reads, and the reader's own thread stays
parked for ``LEND_S`` after. These tests hold the mechanism: who reads when, that a line
of waiters hands the turn on without a poll's delay, that a local value, a stop or a
failure still ends a wait that is reading, and that the reader's own thread takes over
when nobody has read for a while.
"""

from __future__ import annotations

import pickle
import secrets
import socket
import threading
import time
from multiprocessing.connection import Connection

import numpy as np
import pytest

from workbench.runtime.transport import frame_reader
from workbench.runtime.transport.channels import SocketServer
from workbench.runtime.transport.frame_reader import FrameReader
from workbench.runtime.transport.mailbox import Mailbox, Stopped
from workbench.runtime.transport.socket_postman import SocketPostman

OWN = "workbench-channel-io"
#: a wait's poll long enough that a wait ended by it, not by a wake-up, fails the test
LONG_POLL = 60.0


def _wait_for(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


class _Recording(Mailbox):
    """A real mailbox that notes which thread filed each value."""

    def __init__(self) -> None:
        super().__init__()
        self.filed_by: list[str] = []

    def put(self, key, task, replica, value) -> None:
        self.filed_by.append(threading.current_thread().name)
        super().put(key, task, replica, value)


@pytest.fixture
def served():
    """A server with two replicas' mailboxes behind it (as a worker's gateway has) and a
    postman reaching both over one connection."""
    key = secrets.token_bytes(32)
    boxes = {("actor", 0): _Recording(), ("actor", 1): _Recording()}
    server = SocketServer(boxes[("actor", 0)], "127.0.0.1", key, routes=dict(boxes))
    postman = SocketPostman({target: server.address for target in boxes}, key)
    postman.send(("actor", 0), "hello", 0, 0, 0)  # connected: the reader is lent to the boxes
    boxes[("actor", 0)].take("hello", 0, 0, stopped=lambda: False)
    assert _wait_for(lambda: all(box.reader is server._frames for box in boxes.values()))
    yield server, postman, boxes
    postman.close()
    server.close()


def _reading(server) -> bool:
    """Whether a replica's thread (not the reader's own) holds the turn now."""
    return server._frames._holder not in (None, frame_reader._OWN)


def _in_thread(fn, name: str) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # the test reads it
            out.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, out


def test_a_waiting_replica_files_what_arrives_in_its_own_thread(served, monkeypatch):
    server, postman, boxes = served
    monkeypatch.setattr(frame_reader, "LEND_S", LONG_POLL)  # the reader's thread stays out of it
    box = boxes[("actor", 0)]
    before = server._frames.pumped_frames
    thread, out = _in_thread(
        lambda: box.take_all("obs", 1, range(4), stopped=lambda: False, poll=LONG_POLL), "actor-replica"
    )
    assert _wait_for(lambda: _reading(server))
    for i in range(4):
        postman.send(("actor", 0), "obs", 1, i, np.full(3, i))
    thread.join(20)
    assert [v.tolist() for v in out[0]] == [[i] * 3 for i in range(4)]
    assert box.filed_by[-4:] == ["actor-replica"] * 4
    assert server._frames.pumped_frames - before >= 4


def test_a_waiting_replica_that_files_its_own_values_sends_itself_no_wake_ups(served, monkeypatch):
    """The thread reading files the frames for its own wait and sees them when its round
    ends: a wake-up byte to itself per frame (a send, a drain, one more ``select``) is
    waste on every wait of every step. A gather and an act-on-arrival take both."""
    server, postman, boxes = served
    monkeypatch.setattr(frame_reader, "LEND_S", LONG_POLL)
    box, reader = boxes[("actor", 0)], server._frames
    takes = [
        lambda t: box.take_all("obs", t, range(4), stopped=lambda: False, poll=LONG_POLL),
        lambda t: box.take_ready("obs", dict.fromkeys(range(4), t), stopped=lambda: False, poll=LONG_POLL),
    ]
    for task in range(1, 8):  # the first takes the turn from the reader's thread if it holds it
        wakes = reader.wakes
        thread, out = _in_thread(lambda: takes[task % 2](task), "actor-replica")
        assert _wait_for(lambda: _reading(server))
        for i in range(4):
            postman.send(("actor", 0), "obs", task, i, i)
        thread.join(20)
        assert out and not isinstance(out[0], BaseException)
        assert box.filed_by[-1] == "actor-replica"
        assert reader.wakes == wakes or task == 1, f"take {task}"


def test_a_value_filed_while_a_waiter_asks_for_the_turn_ends_its_wait_at_once(served, monkeypatch):
    """Replica 1 asks for the turn while replica 0 reads, and its value is filed by
    replica 0 in that moment: replica 1 must see it then, not at its poll."""
    server, postman, boxes = served
    monkeypatch.setattr(frame_reader, "LEND_S", LONG_POLL)
    first, second = boxes[("actor", 0)], boxes[("actor", 1)]
    reader = server._frames
    real_pump, asked = reader.pump, threading.Event()

    def pump(timeout, wake):
        if threading.current_thread().name != "replica-1":
            return real_pump(timeout, wake)
        got = real_pump(timeout, wake)
        if not got and not asked.is_set():  # in the moment between asking and waiting
            asked.set()
            postman.send(("actor", 1), "x", 1, 0, "for 1")
            assert _wait_for(lambda: second.filed_by)  # filed by replica 0's round
        return got

    monkeypatch.setattr(reader, "pump", pump)
    t0, out0 = _in_thread(lambda: first.take("x", 1, 0, stopped=lambda: False, poll=LONG_POLL), "replica-0")
    assert _wait_for(lambda: _reading(server))
    start = time.monotonic()
    t1, out1 = _in_thread(lambda: second.take("x", 1, 0, stopped=lambda: False, poll=LONG_POLL), "replica-1")
    t1.join(20)
    assert out1 == ["for 1"] and time.monotonic() - start < 10
    postman.send(("actor", 0), "x", 1, 0, "for 0")
    t0.join(20)
    assert out0 == ["for 0"]


def test_the_reader_s_thread_stays_parked_after_a_wait_and_the_next_wait_reads(served, monkeypatch):
    """Frames that come in between two waits (an actor sending) stay in the kernel: no
    thread takes the GIL from the actor for them; the next wait files them."""
    server, postman, boxes = served
    monkeypatch.setattr(frame_reader, "LEND_S", LONG_POLL)
    box = boxes[("actor", 0)]
    thread, out = _in_thread(lambda: box.take("obs", 1, 0, stopped=lambda: False, poll=LONG_POLL), "actor-replica")
    assert _wait_for(lambda: _reading(server))
    postman.send(("actor", 0), "obs", 1, 0, "first")
    thread.join(20)
    assert out == ["first"]
    filed = len(box.filed_by)
    postman.send(("actor", 0), "obs", 2, 0, "between waits")
    time.sleep(0.3)
    assert len(box.filed_by) == filed  # unread: nobody waits, and the reader's thread is parked
    assert box.take("obs", 2, 0, stopped=lambda: False, poll=LONG_POLL) == "between waits"
    assert box.filed_by[-1] == threading.current_thread().name


def test_the_reader_s_thread_reads_again_once_nobody_has_for_a_while(served, monkeypatch):
    """Bytes must not pile up until a sender blocks while a replica is busy elsewhere."""
    server, postman, boxes = served
    monkeypatch.setattr(frame_reader, "LEND_S", 0.05)
    box = boxes[("actor", 0)]
    postman.send(("actor", 0), "obs", 1, 0, "a")
    assert box.take("obs", 1, 0, stopped=lambda: False) == "a"
    postman.send(("actor", 1), "weights", 1, 0, "for the other replica, not waiting")
    assert _wait_for(lambda: boxes[("actor", 1)].filed_by)
    assert boxes[("actor", 1)].filed_by == [OWN]


def test_a_wait_takes_the_turn_from_the_reader_s_thread(served):
    """The reader's thread holds the turn (nobody read lately) and sits in select: a wait
    asks for it, gets it, and still ends when its value comes, long before its poll."""
    server, postman, boxes = served
    box = boxes[("actor", 0)]
    assert _wait_for(lambda: server._frames._holder == frame_reader._OWN)
    thread, out = _in_thread(lambda: box.take("obs", 5, 0, stopped=lambda: False, poll=LONG_POLL), "actor-replica")
    assert _wait_for(lambda: _reading(server))  # the waiter reads
    postman.send(("actor", 0), "obs", 5, 0, "got it")
    thread.join(20)
    assert out == ["got it"] and box.filed_by[-1] == "actor-replica"


def test_a_line_of_waiters_hands_the_turn_on_without_a_poll_s_delay(served):
    """Two replicas of one process wait at once: one reads for both; when its wait ends the
    other gets the turn at once, not at its next poll (a minute here)."""
    server, postman, boxes = served
    first, second = boxes[("actor", 0)], boxes[("actor", 1)]
    t1, out1 = _in_thread(lambda: first.take("x", 1, 0, stopped=lambda: False, poll=LONG_POLL), "replica-0")
    t2, out2 = _in_thread(lambda: second.take("x", 1, 0, stopped=lambda: False, poll=LONG_POLL), "replica-1")
    assert _wait_for(lambda: server._frames._standby)  # one reads, the other is in line
    postman.send(("actor", 0), "x", 1, 0, "for 0")
    t1.join(20)
    time.sleep(0.2)  # replica-1 reads now; its value comes after
    postman.send(("actor", 1), "x", 1, 0, "for 1")
    start = time.monotonic()
    t2.join(20)
    assert out1 == ["for 0"] and out2 == ["for 1"]
    assert time.monotonic() - start < 10


def test_a_value_handed_over_locally_ends_a_wait_that_is_reading(served):
    """A replica of the same process hands its value over without a socket: the wait,
    blocked in select, is woken (not at its poll)."""
    server, postman, boxes = served
    box = boxes[("actor", 0)]
    thread, out = _in_thread(lambda: box.take("obs", 3, 1, stopped=lambda: False, poll=LONG_POLL), "actor-replica")
    assert _wait_for(lambda: _reading(server))
    start = time.monotonic()
    box.put("obs", 3, 1, "local")  # LocalPostman's hand-over
    thread.join(20)
    assert out == ["local"] and time.monotonic() - start < 10


def test_a_reading_wait_still_stops_and_fails(served):
    server, postman, boxes = served
    box = boxes[("actor", 0)]
    flag = threading.Event()
    threading.Timer(0.1, flag.set).start()
    with pytest.raises(Stopped):
        box.take("never", 0, 0, stopped=flag.is_set, poll=0.05)
    # a message that cannot be unpickled, read by the waiting thread itself
    thread, out = _in_thread(lambda: box.take("obs", 9, 0, stopped=lambda: False, poll=LONG_POLL), "actor-replica")
    assert _wait_for(lambda: _reading(server))
    conn = next(iter(postman._conns.values()))
    conn.send_bytes(pickle.dumps(("obs", 9, 0, 1))[:-3])  # truncated
    thread.join(20)
    assert len(out) == 1 and isinstance(out[0], Exception)
    assert "while unpickling" in "".join(getattr(out[0], "__notes__", []))


def test_closing_the_server_while_a_replica_reads_ends_cleanly(served):
    server, postman, boxes = served
    box = boxes[("actor", 0)]
    flag = threading.Event()
    thread, out = _in_thread(lambda: box.take("obs", 1, 0, stopped=flag.is_set, poll=0.2), "actor-replica")
    assert _wait_for(lambda: _reading(server))
    start = time.monotonic()
    server.close()
    assert time.monotonic() - start < 5
    assert not server._frames.thread.is_alive()
    flag.set()
    thread.join(20)
    assert len(out) == 1 and isinstance(out[0], Stopped)


def test_frames_of_every_size_arrive_whole_when_waiters_and_the_thread_take_turns(monkeypatch):
    """GeneratorTurns change between reads of one big frame: the stream's state is the reader's,
    not a thread's, so it arrives whole, and every frame in order."""
    monkeypatch.setattr(frame_reader, "LEND_S", 0.001)
    got, a, b = [], *socket.socketpair()
    reader = FrameReader(lambda frame, conn: got.append(bytes(frame)), lambda conn: None)
    reader.add(Connection(b.detach()))
    sender = Connection(a.detach())
    frames = [bytes([i % 256]) * size for i, size in enumerate([10, 70_000, 5_000_000, 3, 200_000] * 4)]
    stop = threading.Event()

    def waiter() -> None:
        while not stop.is_set():
            reader.pump(0.001, lambda: None)
            time.sleep(0.001)

    pumping = threading.Thread(target=waiter, daemon=True)
    pumping.start()
    try:
        for frame in frames:
            sender.send_bytes(frame)
        assert _wait_for(lambda: len(got) == len(frames))
        assert got == frames
        assert reader.frames == len(frames)
    finally:
        stop.set()
        pumping.join(10)
        reader.close()
        sender.close()
