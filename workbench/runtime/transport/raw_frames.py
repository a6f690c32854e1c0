"""Big byte strings cross a channel as a frame of their own, not inside a pickle.

A channel message is one pickled ``(key, task, replica, value)`` frame. A replica's state
(a snapshot, the export at a run's end) is a byte string already (``dumps_state``), and
pickling it again copied it whole on the sender (into the pickle) and on the receiver (out
of it): for GRPO's 113M-parameter model, 3.17 GB, the sender's copy alone took 8.7 s on the
dev machine, whose memory is slow to touch the first time. A value of :data:`RAW_MIN_BYTES`
or more that is ``bytes``/``bytearray`` now goes as two frames: the message with a
:class:`RawFollows` in the value's place, then the bytes themselves, written from the
sender's object and read into the receiver's own buffer (a ``bytearray``), no other copy.

    >>> header, raw = split_raw("snapshot:learner", 3, 0, b"x" * RAW_MIN_BYTES)
    >>> header[3], len(raw)
    (RawFollows(size=1048576), 1048576)
    >>> split_raw("obs", 3, 0, b"small")
    (('obs', 3, 0, b'small'), None)
    >>> joiner = RawJoiner()
    >>> joiner.take(header, conn="c1") is None      # the value comes in the next frame
    True
    >>> joiner.pending("c1")
    True
    >>> key, task, replica, value = joiner.complete(bytearray(raw), conn="c1")
    >>> key, task, replica, len(value), joiner.pending("c1")
    ('snapshot:learner', 3, 0, 1048576, False)
"""

from __future__ import annotations

from typing import Any, Hashable, NamedTuple

__all__ = ["RAW_MIN_BYTES", "RawFollows", "RawJoiner", "split_raw"]

#: byte strings this long or longer travel as a frame of their own
RAW_MIN_BYTES = 1 << 20


class RawFollows(NamedTuple):
    """In a message's value place: the value is the next frame on this connection."""

    size: int


def split_raw(key: str, task: int, replica: int, value: Any) -> tuple[tuple, bytes | bytearray | None]:
    """The message to pickle and, for a big byte string, the bytes to send right after it."""
    if type(value) in (bytes, bytearray) and len(value) >= RAW_MIN_BYTES:
        return (key, task, replica, RawFollows(len(value))), value
    return (key, task, replica, value), None


class RawJoiner:
    """The receiving side: per connection, a message whose value is still to come."""

    def __init__(self) -> None:
        self._waiting: dict[Hashable, tuple[str, int, int, RawFollows]] = {}

    def take(self, message: tuple, conn: Hashable) -> tuple | None:
        """``message`` as it is, or None when its value is the next frame (kept till then)."""
        if isinstance(message[3], RawFollows):
            self._waiting[conn] = message
            return None
        return message

    def pending(self, conn: Hashable) -> bool:
        """True when ``conn``'s next frame is a value's bytes, not a message."""
        return conn in self._waiting

    def complete(self, frame: bytes | bytearray, conn: Hashable) -> tuple:
        """The message whose value ``frame`` is."""
        key, task, replica, follows = self._waiting.pop(conn)
        if len(frame) != follows.size:
            raise ValueError(f"a channel value of {follows.size:,} bytes came as {len(frame):,}")
        return key, task, replica, frame
