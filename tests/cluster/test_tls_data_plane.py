"""On a TLS cluster the data plane is encrypted: a capture of the replica channels and the
snapshot channel holds TLS records only — no marker bytes, no pickles. On a plain cluster
the same capture finds both (the control that makes the test able to fail).

The capture is real traffic: a forwarding proxy in the test process, which the run's
channel addresses are pointed at, records every byte each way while relaying it. The
replicas' own sockets and TLS contexts are untouched; only the address they dial changes.
"""

from __future__ import annotations

import secrets
import socket
import struct
import threading

import numpy as np
import pytest

import workbench as wb
from tests.conftest import tls_local_cluster
from workbench.cluster import backend, liveness
from workbench.runtime.transport.channels import Mailbox, SocketServer
from workbench.runtime.transport.socket_postman import SocketPostman

#: per-step trajectory rows and the learner's weights carry these bytes
TRAJ_MARKER = b"wb-tls-capture:trajectory-row:" + secrets.token_hex(8).encode()
WEIGHT_MARKER = b"wb-tls-capture:learner-weight:" + secrets.token_hex(8).encode()
ITERATIONS, STEPS = 3, 4


class CapturingProxy:
    """Relays TCP connections to ``target``, recording each direction's bytes."""

    def __init__(self, target: tuple[str, int], role: str) -> None:
        self.target, self.role = target, role
        self.streams: list[bytearray] = []  # one per connection and direction
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._spawn(self._accept)

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            if self._closed:
                inbound.close()
                return
            try:
                outbound = socket.create_connection(self.target)
            except OSError:  # the server is gone (the run is closing): drop the caller too
                inbound.close()
                continue
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                record = bytearray()
                self.streams.append(record)
                self._spawn(self._pump, source, sink, record)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, record: bytearray) -> None:
        try:
            while chunk := source.recv(65536):
                record += chunk
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
                try:
                    sock.shutdown(how)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        try:
            socket.create_connection(self.address, timeout=1).close()
        except OSError:
            pass
        self._listener.close()
        for thread in self._threads:
            thread.join(10)


@pytest.fixture
def capture(monkeypatch):
    """Every channel address the driver hands out — each replica's server and the driver's
    snapshot server — is swapped for a capturing proxy's; yields the proxies."""
    proxies: list[CapturingProxy] = []

    def proxied(address, role: str) -> tuple[str, int]:
        proxies.append(CapturingProxy(tuple(address), role))
        return proxies[-1].address

    real_deploy = backend.DaskBackend.deploy

    def deploy(self, *args, **kwargs):
        real_deploy(self, *args, **kwargs)
        self._addresses = {key: proxied(address, "replica") for key, address in self._addresses.items()}

    class SnapshotServer(SocketServer):  # the driver's: workers dial .address
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.real_address, self.address = self.address, proxied(self.address, "snapshots")

        def close(self) -> None:
            self.address = self.real_address  # close wakes its own accept directly
            super().close()

    monkeypatch.setattr(backend.DaskBackend, "deploy", deploy)
    monkeypatch.setattr(backend, "SocketServer", SnapshotServer)
    yield proxies
    for proxy in proxies:
        proxy.close()


def marked_fdg() -> wb.FDG:
    """Actors step, envs emit a marked trajectory row per step (stacked, gathered by the
    learner), the learner broadcasts marked weights back and snapshots its state."""
    fdg = wb.FDG(
        namespace={
            "np": np,
            "wb": wb,
            "TRAJ": np.frombuffer(TRAJ_MARKER, np.uint8),
            "WEIGHTS": np.frombuffer(WEIGHT_MARKER, np.uint8),
        }
    )
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("learner", "weights = WEIGHTS.copy()\nrows = 0", rate="init")
    fdg.add_fragment("actor", "w = weights", rate="init")
    fdg.add_fragment("actor", "action = obs + float(w[0])", rate="step")
    fdg.add_fragment("env", "obs = action * 0.5\ntraj = TRAJ.copy()", rate="step")
    fdg.add_fragment(
        "learner",
        "rows += traj.size // TRAJ.size\n"
        "ok = bool((traj.reshape(-1, TRAJ.size) == TRAJ).all())\n"
        "wb.log('learner/rows', rows)\nwb.log('learner/ok', float(ok))\n"
        "weights = WEIGHTS.copy()",
        rate="iteration",
    )
    fdg.add_fragment("actor", "w = weights", rate="iteration")
    return fdg


def _run_through(capture, client) -> dict[str, list[bytes]]:
    """Run the marked FDG with its channels through ``capture``: the bytes each way of each
    connection, by role ("replica" channels, the driver's "snapshots" channel)."""
    run = marked_fdg().run(
        iterations=ITERATIONS, steps=STEPS, policy="coarse", cluster=client, snapshot_every=1, progress=False
    )
    assert run.status == "finished"
    # both actor replicas' rows reached the learner, intact
    assert run.metrics["learner/rows"].tolist()[-1] == 2 * ITERATIONS * STEPS
    assert run.metrics["learner/ok"].tolist() == [1.0] * ITERATIONS
    for proxy in capture:
        proxy.close()  # the run closed its channels: every pump ends, every byte is recorded
    streams = {
        role: [bytes(s) for proxy in capture if proxy.role == role for s in proxy.streams if s]
        for role in ("replica", "snapshots")
    }
    # the run's traffic went through the proxies: trajectories and weights across
    # processes (a total well past the handshakes'), snapshots to this process
    assert sum(map(len, streams["replica"])) > ITERATIONS * STEPS * len(TRAJ_MARKER)
    assert streams["snapshots"]
    return streams


def _pickled_markers() -> list[bytes]:
    """The opcodes that carry the marked values' bytes in their protocol-5 pickles (the
    BYTEARRAY8 opcode, its length, the buffer): a replica's stacked trajectory rows of one
    iteration, and the learner's weights."""
    import pickle
    import pickletools

    found = []
    for value in (
        np.stack([np.frombuffer(TRAJ_MARKER, np.uint8)] * STEPS),
        np.frombuffer(WEIGHT_MARKER, np.uint8).copy(),
    ):
        pickled = pickle.dumps(value, protocol=5)
        at = next(pos for op, _, pos in pickletools.genops(pickled) if op.name == "BYTEARRAY8")
        found.append(pickled[at : at + 9 + value.nbytes])
    return found


def _tls_records(stream: bytes) -> list[int]:
    """The content types of the TLS records ``stream`` consists of; AssertionError where
    any byte is not inside a well-formed record (plaintext would not parse)."""
    types, at = [], 0
    while at < len(stream):
        assert len(stream) - at >= 5, f"{len(stream) - at} stray bytes after the last TLS record"
        kind, major, minor, length = struct.unpack("!BBBH", stream[at : at + 5])
        assert kind in (20, 21, 22, 23) and major == 3 and minor in (1, 2, 3, 4), (
            f"not a TLS record header at byte {at}: {stream[at : at + 16]!r}"
        )
        assert length <= 2**14 + 256, f"TLS record of {length} bytes at {at}"
        types.append(kind)
        at += 5 + length
    return types


@pytest.fixture(scope="module")
def tls_client():
    """A client of a 2-worker TLS-only LocalCluster (tests/conftest.py)."""
    from distributed import Client

    with tls_local_cluster() as cluster, Client(cluster, security=cluster.security, set_as_default=False) as client:
        yield client


def test_a_capture_of_a_tls_clusters_channels_holds_no_plaintext(tls_client, capture):
    by_role = _run_through(capture, tls_client)
    streams = by_role["replica"] + by_role["snapshots"]
    everything = b"".join(streams)
    for marker in (TRAJ_MARKER, WEIGHT_MARKER):
        assert marker not in everything
    for pickled in _pickled_markers():
        assert pickled not in everything
    for stream in streams:
        types = _tls_records(stream)
        assert types[0] == 22  # each connection opens with a TLS handshake
    # the payload went as encrypted application data
    assert sum(len(s) for s in streams if 23 in _tls_records(s)) > ITERATIONS * STEPS * len(TRAJ_MARKER)


def test_the_same_capture_on_a_plain_cluster_finds_the_pickles(client, capture):
    """The control: without TLS the capture sees the markers, pickled (protocol 5)."""
    import pickletools

    by_role = _run_through(capture, client)
    streams = by_role["replica"] + by_role["snapshots"]
    everything = b"".join(streams)
    assert WEIGHT_MARKER in b"".join(by_role["snapshots"])  # the learner's state, snapshotted
    for marker in (TRAJ_MARKER, WEIGHT_MARKER):
        assert marker in everything
    for pickled in _pickled_markers():
        assert pickled in everything
    frames = [frame for stream in streams for frame in _frames(stream)]
    # a pickle of protocol 5 opens PROTO 5 then FRAME (\x95): two bytes alone also open, one
    # time in 65,536, a frame of other bytes (a handshake's random digest, a raw frame)
    pickles = [f for f in frames if f[:3] == b"\x80\x05\x95"]
    assert pickles and all(list(pickletools.genops(p)) for p in pickles)
    with pytest.raises(AssertionError):
        _tls_records(everything)


def _frames(stream: bytes) -> list[bytes]:
    """multiprocessing.connection frames: a 4-byte big-endian length, then the bytes."""
    frames, at = [], 0
    while at + 4 <= len(stream):
        (size,) = struct.unpack("!i", stream[at : at + 4])
        frames.append(stream[at + 4 : at + 4 + size])
        at += 4 + size
    return frames


# ---------------------------------------------------------------------------- the channel itself
@pytest.fixture(scope="module")
def make_tls():
    pytest.importorskip("cryptography")
    from distributed.security import Security

    from workbench.cluster.channel_security import channel_tls

    return lambda security=None: channel_tls(security or Security.temporary(), "worker", "this test")


def test_a_tls_channel_carries_values_and_answers_the_liveness_probe(make_tls):
    from distributed.security import Security

    security = Security.temporary()
    tls, key, box = make_tls(security), secrets.token_bytes(32), Mailbox()
    server = SocketServer(box, "127.0.0.1", key, tls)
    try:
        postman = SocketPostman({("x", 0): server.address}, key, tls=tls)
        big = np.arange(3_000_000, dtype=np.float32)  # frames past one TLS record
        postman.send(("x", 0), "big", 0, 0, big)
        postman.send(("x", 0), "small", 0, 0, "hello")
        assert np.array_equal(box.take("big", 0, 0, stopped=lambda: False), big)
        assert box.take("small", 0, 0, stopped=lambda: False) == "hello"
        postman.close()
        assert liveness.answers(server.address, timeout=10, tls=tls)
        # a probe in clear gets no challenge from a TLS server: it waits for a TLS hello
        assert not liveness.answers(server.address, timeout=0.5)
    finally:
        server.close()


def test_a_peer_with_another_clusters_certificates_is_turned_away(make_tls):
    from distributed.security import Security

    key, box = secrets.token_bytes(32), Mailbox()
    server = SocketServer(box, "127.0.0.1", key, make_tls(Security.temporary()))
    try:
        stranger = SocketPostman({("x", 0): server.address}, key, tls=make_tls(Security.temporary()))
        with pytest.raises((OSError, EOFError)):  # ssl.SSLError is an OSError
            stranger.send(("x", 0), "k", 0, 0, 1)
        stranger.close()
        assert len(box) == 0
    finally:
        server.close()


def test_a_peer_silent_in_the_tls_handshake_is_dropped(make_tls, monkeypatch):
    """A TCP connection that never sends its TLS hello is closed after the handshake
    deadline (its reader thread ends); the server keeps serving."""
    import socket

    from tests.runtime.test_channel_fan_in import assert_dropped, assert_still_serves
    from workbench.runtime.transport import channels

    monkeypatch.setattr(channels, "HANDSHAKE_TIMEOUT_S", 0.5)
    tls, key, box = make_tls(), secrets.token_bytes(32), Mailbox()
    server = SocketServer(box, "127.0.0.1", key, tls)
    silent = socket.create_connection(server.address, timeout=10)
    try:
        assert silent.recv(4096) == b""  # no hello from us, no bytes from it: closed at the deadline
        assert_dropped(server)
        assert_still_serves(server, box, key, tls)
    finally:
        silent.close()
        server.close()
