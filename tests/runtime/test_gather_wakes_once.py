"""A gather across W replicas wakes its waiting thread once, and small arrays cross a
channel as they would through NumPy's own pickling.

Fine's single actor gathers one observation per env replica every step. Each arrival used
to wake it (a notify_all per put) while it waited for sender 0, then sender 1, …: W
wake-ups per step, each taking the GIL from the reader threads still filing the rest.
Small arrays (a step's action or observation) went through NumPy's own reduction, 7-14 µs
each on the sending side, where their raw buffer takes ~1 µs.
"""

from __future__ import annotations

import pickle
import secrets
import threading
import time

import numpy as np
import pytest

from workbench.runtime.transport.channels import Peers, SocketServer, dumps
from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.transport.mailbox import Mailbox, Stopped

W = 8


def _deadline(seconds: float = 20.0):
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end


def test_a_gather_over_sockets_wakes_the_receiver_once_per_step():
    """W postmen (one per env replica) send over real sockets to one server; the receiver,
    already waiting, is woken once per step however the values interleave."""
    key = secrets.token_bytes(32)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    postmen = [SocketPostman({("actor", 0): server.address}, key) for _ in range(W)]
    peers = Peers("actor", 0, box, None, {"env": W, "actor": 1}, _deadline())
    steps, got = 5, []
    try:
        for step in range(steps):
            waiting = threading.Event()
            sent = []

            def send_all(step=step) -> None:
                waiting.wait(5)
                for i in reversed(range(W)):  # the last sender first: an in-order wait saw W wake-ups
                    postmen[i].send(("actor", 0), "obs", step, i, np.full((2, 4), i, np.float32))
                sent.append(step)

            sender = threading.Thread(target=send_all, daemon=True)
            sender.start()
            waiting.set()
            got.append(peers.receive("env", "gather", "obs", step))
            sender.join(10)
            assert sent == [step]
    finally:
        for postman in postmen:
            postman.close()
        server.close()
    for value in got:  # every replica's rows, in replica order
        assert value.shape == (2 * W, 4) and value[::2, 0].tolist() == list(range(W))
    # each step's wait ended by one wake-up at most (none when all had arrived already)
    assert box.wakeups <= steps


def test_a_wait_is_not_woken_by_values_it_does_not_need():
    box = Mailbox()
    result = []
    waiter = threading.Thread(target=lambda: result.append(box.take_all("obs", 3, range(W), _deadline())))
    waiter.start()
    time.sleep(0.05)  # let it wait (if it has not yet, it finds the values in: no wake-up)
    for i in range(W):
        box.put("obs", 2, i, "old")  # another step's
        box.put("reward", 3, i, "no")  # another key's
    for i in range(W - 1):
        box.put("obs", 3, i, i)
    time.sleep(0.1)  # a thread woken by any of these would have counted it by now
    assert box.wakeups == 0 and waiter.is_alive()
    box.put("obs", 3, W - 1, W - 1)
    waiter.join(10)
    assert result == [list(range(W))] and box.wakeups <= 1


def test_a_waiting_gather_still_stops_and_fails():
    box = Mailbox()
    flag = threading.Event()
    with pytest.raises(Stopped):
        threading.Timer(0.1, flag.set).start()
        box.take_all("obs", 0, range(W), flag.is_set)
    failure = ValueError("a message did not unpickle")
    threading.Timer(0.1, lambda: box.fail(failure)).start()
    with pytest.raises(ValueError, match="did not unpickle"):
        box.take_all("obs", 0, range(W), _deadline())


def test_take_next_still_takes_values_as_they_arrive():
    box = Mailbox(arrival_keys=("grads",))
    threading.Timer(0.05, lambda: box.put("grads", 4, 1, "from 1")).start()
    assert box.take_next("grads", _deadline()) == (4, 1, "from 1")
    box.put("grads", 5, 0, "from 0")
    assert box.take_next("grads", _deadline()) == (5, 0, "from 0")


ARRAYS = {
    "view of a batch": np.arange(32, dtype=np.int64).reshape(8, 4)[2:4],
    "0-d": np.array(0.5),
    "bool": np.array([True, False]),
    "big-endian": np.arange(4, dtype=">i4"),
    "empty": np.zeros((0, 4), np.float32),
    "complex": np.ones(3, np.complex64),
    "Fortran order": np.asfortranarray(np.arange(6.0).reshape(2, 3)),  # NumPy's path
    "strided view": np.arange(10)[::3],  # NumPy's path
    "strings": np.array(["a", "bc"]),  # NumPy's path
    "objects": np.array([1, None], dtype=object),  # NumPy's path
    "big": np.arange(100_000, dtype=np.float64),  # NumPy's path
}


@pytest.mark.parametrize("name", list(ARRAYS))
def test_an_array_arrives_as_numpys_own_pickling_gives_it(name):
    array = ARRAYS[name]
    ours = pickle.loads(dumps(("k", 1, 0, array)))[3]
    numpys = pickle.loads(pickle.dumps(array, protocol=5))
    assert type(ours) is type(numpys) and ours.dtype == numpys.dtype and ours.shape == numpys.shape
    assert ours.tolist() == numpys.tolist()
    assert ours.flags.writeable and ours.flags.c_contiguous == numpys.flags.c_contiguous
    ours[...] = numpys  # the receiver's own: writing into it reaches no one else
    assert array.tolist() == ARRAYS[name].tolist()


def test_a_read_only_array_arrives_as_numpy_gives_it():
    array = np.arange(3)
    array.flags.writeable = False
    ours = pickle.loads(dumps(array))
    assert ours.tolist() == [0, 1, 2]
    assert ours.flags.writeable == pickle.loads(pickle.dumps(array, protocol=5)).flags.writeable
