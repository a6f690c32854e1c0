"""Direct channels between replicas: a mailbox per replica, and postmen that fill them.

Replica loops exchange per-iteration (and, for fine-grained policies, per-step) values
directly, not through the Dask scheduler or the notebook: a value sent to a replica in the
same process is handed over by reference; one sent to another process goes over a socket
(``multiprocessing.connection``, HMAC-authenticated with a per-run key, pickle protocol 5).

Example:
    >>> box = Mailbox()
    >>> LocalPostman({("learner", 0): box}).send(("learner", 0), "traj", 3, 0, [1, 2])
    >>> box.take("traj", 3, 0, stopped=lambda: False)
    [1, 2]
"""
from __future__ import annotations

import io
import pickle
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Client, Listener
from typing import Any

import cloudpickle

__all__ = ["Mailbox", "Stopped", "LocalPostman", "SocketServer", "SocketPostman", "dumps", "dumps_state"]

Address = tuple[str, int]
Target = tuple[str, int]  # (group, replica)


class _Pickler(pickle.Pickler):
    """pickle, with plain CPU torch tensors sent as their NumPy buffers: ~10× cheaper than
    torch's own reduction for a state_dict of small tensors (weights every iteration)."""

    def reducer_override(self, obj):
        if type(obj).__module__ == "torch" and type(obj).__name__ in ("Tensor", "Parameter"):
            if obj.device.type == "cpu" and not obj.requires_grad and obj.layout is _torch_strided():
                try:
                    return _tensor_from_numpy, (obj.numpy(),)
                except TypeError:  # a dtype NumPy lacks (bfloat16…): torch's own reduction
                    pass
        return NotImplemented


def _torch_strided():
    import torch

    return torch.strided


def _tensor_from_numpy(array, requires_grad: bool = False):
    import torch

    tensor = torch.from_numpy(array)
    return tensor.requires_grad_() if requires_grad else tensor


class _StatePickler(cloudpickle.Pickler):
    """cloudpickle (a fragment's functions and classes travel by value) with the same fast
    path for CPU tensors, parameters included (a learner's network and optimiser state):
    a PPO learner's state pickles in ~1 ms instead of ~3.7 ms."""

    def reducer_override(self, obj):
        if type(obj).__module__ == "torch" and type(obj).__name__ in ("Tensor", "Parameter"):
            if obj.device.type == "cpu" and obj.layout is _torch_strided() and (obj.is_leaf or not obj.requires_grad):
                try:
                    array = obj.detach().numpy()
                except TypeError:  # a dtype NumPy lacks: torch's own reduction
                    return super().reducer_override(obj)
                if type(obj).__name__ == "Parameter":
                    return _parameter_from_numpy, (array, obj.requires_grad)
                return _tensor_from_numpy, (array, obj.requires_grad)
        return super().reducer_override(obj)


def _parameter_from_numpy(array, requires_grad: bool):
    import torch

    return torch.nn.Parameter(torch.from_numpy(array), requires_grad=requires_grad)


def dumps_state(value: Any) -> bytes:
    """Serialise a replica's state (snapshots, exports, deploys): cloudpickle, protocol 5,
    with CPU tensors as their NumPy buffers."""
    buffer = io.BytesIO()
    _StatePickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


def dumps(value: Any) -> bytes:
    """Serialise a value for a channel (pickle protocol 5, fast path for torch tensors)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


class Stopped(Exception):
    """The run is stopping: a blocked receive gives up."""


class Mailbox:
    """Inbound values of one replica: per (key, sending replica), the versions sent, by
    producer task. A value stays until a newer version of it is taken, because "latest
    value" interfaces read one emission many times."""

    def __init__(self, arrival_keys: tuple[str, ...] = ()) -> None:
        self._items: dict[tuple[str, int], dict[int, Any]] = {}
        # arrival order, kept only for keys an asynchronous consumer takes as they come
        self._arrivals: dict[str, deque[tuple[int, int]]] = {k: deque() for k in arrival_keys}
        self._cond = threading.Condition()

    def put(self, key: str, task: int, replica: int, value: Any) -> None:
        with self._cond:
            self._items.setdefault((key, replica), {})[task] = value
            if key in self._arrivals:
                self._arrivals[key].append((task, replica))
            self._cond.notify_all()

    def take_next(self, key: str, stopped: Callable[[], bool], poll: float = 0.05) -> tuple[int, int, Any]:
        """The oldest unclaimed value of ``key`` from any replica, as (task, replica, value):
        an as-they-arrive queue for asynchronous consumers."""
        with self._cond:
            while True:
                queue = self._arrivals.get(key)
                while queue:
                    task, replica = queue.popleft()
                    versions = self._items.get((key, replica), {})
                    if task in versions:
                        return task, replica, versions.pop(task)
                if stopped():
                    raise Stopped()
                self._cond.wait(poll)

    def take(self, key: str, task: int, replica: int, stopped: Callable[[], bool],
             poll: float = 0.05) -> Any:
        """Wait for the version ``task`` of ``key`` from ``replica``; older versions are
        dropped. Raises :class:`Stopped` if the run stops first."""
        with self._cond:
            versions = self._items.setdefault((key, replica), {})
            while task not in versions:
                if stopped():
                    raise Stopped()
                self._cond.wait(poll)
            for old in [t for t in versions if t < task]:
                del versions[old]
            return versions[task]

    def __len__(self) -> int:
        return sum(len(v) for v in self._items.values())


class LocalPostman:
    """Delivers to mailboxes in this process, by reference (no serialisation)."""

    def __init__(self, boxes: dict[Target, Mailbox]) -> None:
        self.boxes = boxes
        self.bytes_sent = 0

    def send(self, target: Target, key: str, task: int, replica: int, value: Any) -> None:
        self.boxes[target].put(key, task, replica, value)

    def close(self) -> None:
        pass


class Peers:
    """What a replica's loop lends the replica: direct channels to the other replicas.

    ``send``/``receive`` move per-step values between groups (scatter/gather across
    replica counts); ``allreduce`` averages a value across the replicas of one group.
    """

    def __init__(self, group: str, index: int, mailbox: Mailbox, postman, counts: dict[str, int],
                 stopped: Callable[[], bool]) -> None:
        self.group, self.index = group, index
        self.mailbox, self.postman, self.counts, self.stopped = mailbox, postman, counts, stopped
        self._reductions = 0

    def send(self, consumer_group: str, spatial: str, key: str, tag: int, value: Any) -> None:
        from workbench.fdg.wiring import receivers_for
        from workbench.runtime.arrays import split

        targets = receivers_for(spatial, self.index, self.counts[consumer_group])
        pieces = split(value, self.counts[consumer_group]) if spatial == "scatter" else None
        for target in targets:
            part = pieces[target] if pieces is not None else value
            self.postman.send((consumer_group, target), key, tag, self.index, part)

    def receive(self, producer_group: str, spatial: str, key: str, tag: int) -> Any:
        from workbench.fdg.wiring import senders_for
        from workbench.runtime.arrays import gather

        senders = senders_for(spatial, self.index, self.counts[producer_group])
        values = [self.mailbox.take(key, tag, s, self.stopped) for s in senders]
        return gather(values, 0) if spatial == "gather" else values[0]

    def allreduce(self, value: Any) -> Any:
        """The mean of ``value`` over this group's replicas, identical on every replica
        (summed in replica order, so floating-point rounding agrees too)."""
        count = self.counts[self.group]
        if count == 1:
            return value
        tag, self._reductions = self._reductions, self._reductions + 1
        key = f"allreduce:{self.group}"
        for other in range(count):
            if other != self.index:
                self.postman.send((self.group, other), key, tag, self.index, value)
        parts = [value if r == self.index else self.mailbox.take(key, tag, r, self.stopped)
                 for r in range(count)]
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total / count


class SocketServer:
    """Accepts connections from other replicas' postmen and files what they send."""

    def __init__(self, mailbox: Mailbox, host: str, authkey: bytes) -> None:
        self.mailbox = mailbox
        self._authkey = authkey
        self._listener = Listener((host, 0), authkey=authkey)
        self.address: Address = self._listener.address
        self._conns: list = []
        self._closed = False
        threading.Thread(target=self._accept, name="workbench-channel-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except Exception:  # listener closed, or a peer failed authentication
                if self._closed:
                    return
                continue
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), name="workbench-channel-read",
                             daemon=True).start()

    def _read(self, conn) -> None:
        while True:
            try:
                key, task, replica, value = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            self.mailbox.put(key, task, replica, value)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # unblock the accept thread: it returns for this connection and sees _closed
            Client(self.address, authkey=self._authkey).close()
        except OSError:
            pass
        self._listener.close()
        for conn in self._conns:
            conn.close()


class SocketPostman:
    """Sends to replicas in other processes; in-process targets get the local fast path."""

    def __init__(self, addresses: dict[Target, Address], authkey: bytes,
                 local: dict[Target, Mailbox] | None = None) -> None:
        self.addresses = addresses
        self.authkey = authkey
        self.local = local or {}
        self._conns: dict[Target, Any] = {}
        self._lock = threading.Lock()
        self._last_payload: tuple | None = None
        self.bytes_sent = 0

    def send(self, target: Target, key: str, task: int, replica: int, value: Any) -> None:
        box = self.local.get(target)
        if box is not None:
            box.put(key, task, replica, value)
            return
        # one value often goes to several replicas (a broadcast): serialise it once
        cached = self._last_payload
        if cached is not None and cached[0] is value and cached[1] == (key, task, replica):
            payload = cached[2]
        else:
            payload = dumps((key, task, replica, value))
            self._last_payload = (value, (key, task, replica), payload)
        with self._lock:
            conn = self._conns.get(target)
            if conn is None:
                conn = self._conns[target] = Client(self.addresses[target], authkey=self.authkey)
            conn.send_bytes(payload)
            self.bytes_sent += len(payload)

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
