"""Big byte strings (snapshots, exported states) cross a channel as a frame of their own
(workbench.runtime.transport.raw_frames), in order with the messages around them, plain and over TLS;
the driver's ExportBox hands a final state to the export or says it never came."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from workbench.cluster.state_export import ExportBox, export_key
from workbench.runtime.transport.channels import Mailbox, SocketServer, Stopped
from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.transport.raw_frames import RAW_MIN_BYTES

DRIVER = ("driver", 0)


def _take(box: Mailbox, key: str, task: int, replica: int = 0):
    deadline = time.monotonic() + 20
    try:
        return box.take(key, task, replica, stopped=lambda: time.monotonic() > deadline)
    except Stopped:
        raise AssertionError(f"{key} of task {task} never arrived") from None


def _tls(secure: bool):
    """Channel TLS contexts of a throw-away cluster certificate, or None (plain)."""
    if not secure:
        return None
    pytest.importorskip("cryptography")
    from distributed.security import Security

    from workbench.cluster.channel_security import channel_tls

    return channel_tls(Security.temporary(), "worker", "this test")


@pytest.mark.parametrize("kind", [bytes, bytearray])
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_a_big_byte_string_arrives_whole_between_small_messages(kind, secure):
    key, tls = secrets.token_bytes(32), _tls(secure)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key, tls)
    postman = SocketPostman({DRIVER: server.address}, key, tls=tls)
    big = kind(secrets.token_bytes(64) * (RAW_MIN_BYTES // 64 + 3))  # past the threshold, not round
    try:
        postman.send(DRIVER, "report", 1, 0, {"small": 1})
        postman.send(DRIVER, "snapshot:learner", 1, 0, big)
        postman.send(DRIVER, "report", 2, 0, b"just under" * 10)
        postman.send(DRIVER, "snapshot:learner", 2, 0, big[::-1])
        assert _take(box, "report", 1) == {"small": 1}
        first, second = _take(box, "snapshot:learner", 1), _take(box, "snapshot:learner", 2)
        assert first == big and second == big[::-1]
        # read into the receiver's own buffer, not unpickled: a bytearray whatever was sent
        assert type(first) is bytearray and type(second) is bytearray
        assert _take(box, "report", 2) == b"just under" * 10  # a small one is still a pickle
        assert postman.bytes_sent >= 2 * len(big)
    finally:
        postman.close()
        server.close()


def test_the_export_box_waits_for_a_state_and_gives_up_when_its_worker_is_lost():
    box = ExportBox()
    later = threading.Timer(0.2, box.put, args=(export_key("actor+env"), 0, 1, b"state"))
    later.start()
    assert box.take(("actor+env", 1), size=5, lost=lambda: False) == b"state"
    with pytest.raises(ConnectionError, match=r"learner\[0\] \(7 bytes\) did not reach the notebook"):
        box.take(("learner", 0), size=7, lost=lambda: True)
