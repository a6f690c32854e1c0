"""A finished run's replica states come to the notebook over the run's own channel.

``keep_state=True`` brings every replica's state (networks, optimisers, envs, counters) to
the notebook at the end of a run. It came back as the result of a Dask task: for GRPO with a
113M-parameter model (3.17 GB of state: the learner's model and Adam moments, the reference,
the generate replica's copy) Dask moved the bytes at ~200 MB/s, and the export took ~26 s on
the dev machine. Now each replica's export task sends its pickled state to the driver's
channel server, the one its reports and snapshots already go to (HMAC-authenticated, TLS on
a TLS cluster), and returns only its size; the driver's :class:`ExportBox` holds what
arrived until the export collects it.

Example (the box on its own; a replica sends with `send_export`)::

    >>> box = ExportBox()
    >>> box.put(export_key("learner"), 0, 0, b"state")
    >>> box.take(("learner", 0), size=5, lost=lambda: False)
    b'state'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.state.snapshots import DRIVER

__all__ = ["EXPORT_PREFIX", "ExportBox", "export_key", "send_export"]

#: channel keys of exported states: ``export:<group>``
EXPORT_PREFIX = "export:"
#: the slowest transfer an export is waited for before the driver gives up on it (bytes/s)
_SLOWEST_BPS = 20e6
_WAIT_STEP_S = 0.5


def export_key(group: str) -> str:
    """The channel key a replica of ``group`` sends its exported state under."""
    return EXPORT_PREFIX + group


class ExportBox:
    """Where the driver's channel server files exported states until the export takes them."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], bytes] = {}
        self._arrived = threading.Condition()

    def put(self, key: str, task: int, replica: int, value: bytes) -> None:
        with self._arrived:
            self._states[(key[len(EXPORT_PREFIX) :], replica)] = value
            self._arrived.notify_all()

    def take(self, replica: tuple[str, int], size: int, lost: Callable[[], bool]) -> bytes:
        """The state ``replica`` (group, index) sent, once all ``size`` bytes are here. Its
        task has returned, so the bytes are on their way; raises ``ConnectionError`` if they
        do not come (``lost()``: the sending worker died) within a time allowed for their size."""
        deadline = time.monotonic() + 30 + size / _SLOWEST_BPS
        with self._arrived:
            while replica not in self._states:
                if lost() or time.monotonic() > deadline:
                    raise ConnectionError(
                        f"the exported state of {replica[0]}[{replica[1]}] ({size:,} bytes) did not reach the notebook"
                    )
                self._arrived.wait(_WAIT_STEP_S)
            return self._states.pop(replica)


def send_export(replica, group: str, index: int, driver: tuple[str, int], authkey: bytes, tls) -> int:
    """On the replica's worker: pickle ``replica``'s state and send it to the driver's
    channel server at ``driver``; returns its size in bytes."""
    data = replica.state_bytes()
    postman = SocketPostman({DRIVER: driver}, authkey, tls=tls)
    try:
        postman.send(DRIVER, export_key(group), 0, index, data)
    finally:
        postman.close()
    return len(data)
