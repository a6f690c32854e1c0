"""Direct channels between replicas: a mailbox per replica, and postmen that fill them.

Replica loops exchange per-iteration (and, for fine-grained policies, per-step) values
directly, not through the Dask scheduler or the notebook: a value sent to a replica in the
same process is handed over by reference; one sent to another process goes over a socket
(``multiprocessing.connection``'s framing, HMAC-authenticated with a per-run key, pickle
protocol 5) — inside TLS with the cluster's certificates when the cluster uses TLS
(:mod:`workbench.runtime.transport.wire`) — and a server files what all its plain connections bring
from one reader (:mod:`workbench.runtime.transport.frame_reader`: its own thread, or the thread of a
replica waiting for values) into the replica's :class:`Mailbox`. The postman
that sends over sockets is :mod:`workbench.runtime.transport.socket_postman`.

Example:
    >>> box = Mailbox()
    >>> LocalPostman({("learner", 0): box}).send(("learner", 0), "traj", 3, 0, [1, 2])
    >>> box.take("traj", 3, 0, stopped=lambda: False)
    [1, 2]
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import answer_challenge, deliver_challenge
from typing import Any

import cloudpickle

from workbench.context import current
from workbench.runtime.transport import wire
from workbench.runtime.values.arrays import handed_over, tensor_view_key
from workbench.runtime.values.allreduce import CHUNKED_MIN_BYTES, allreduce, other_iteration
from workbench.runtime.transport.frame_reader import FrameReader, StopReading
from workbench.runtime.transport.mailbox import Mailbox, Stopped
from workbench.runtime.transport.raw_frames import RawJoiner
from workbench.runtime.transport.wire import ChannelTLS

__all__ = ["Mailbox", "Stopped", "LocalPostman", "SocketServer", "ROUTE", "dumps", "dumps_state"]

Address = tuple[str, int]
Target = tuple[str, int]  # (group, replica)
#: connections a channel server queues before accepting them (all replicas of a big run)
BACKLOG = 512
#: how long closing a channel server waits for its threads to end
CLOSE_JOIN_S = 2.0
#: the first item of a route frame, ``(ROUTE, target)``: the messages after it on its
#: connection are for ``target``'s mailbox (workbench.runtime.transport.socket_postman; a plain tuple,
#: which unpickles the same wherever a module was imported from; a message is a 4-tuple)
ROUTE = "workbench:route-to"
#: how long a connection may take to pass the TLS and HMAC handshakes; one that has not
#: by then (a peer cut off mid-handshake, a port scanner) is closed, freeing its thread
HANDSHAKE_TIMEOUT_S = 30.0


def _reduce_array_value(obj, seen: dict | None = None):
    """How a tensor or a device array crosses a process boundary, or None for the default.

    torch tensors and parameters (CPU or CUDA, no autograd history to lose) go as their
    host NumPy buffer — ~10× cheaper than torch's own reduction for a state_dict of small
    tensors — with ``requires_grad``, whether it was a Parameter, and its device recorded;
    CuPy arrays go as their host buffer and device. The receiver restores each onto that
    device where it has it, else onto the CPU (``_restore_tensor`` / ``_restore_cupy``), so
    a snapshot opens in a notebook without a GPU. One path for channels and states alike.

    With ``seen`` (a dict the pickler keeps for one dump), tensors that are the same view
    of one storage — a model's parameters and the ``model.state_dict()`` a cell keeps beside
    it — share one host array, which pickle then writes once: a GRPO learner's state holds
    its model's weights twice so, 453 MB more for the 113M model. Restored on the CPU they
    share memory again, as they did.
    """
    module, name = type(obj).__module__, type(obj).__name__
    if module.startswith("torch") and name in ("Tensor", "Parameter"):
        if obj.layout is not _torch_strided() or not (obj.is_leaf or not obj.requires_grad):
            return None  # sparse, or a non-leaf with a graph: torch's own reduction (or error)
        device = obj.device
        if device.type not in ("cpu", "cuda"):
            return None
        key = tensor_view_key(obj) if seen is not None else None
        array = seen.get(key) if key is not None else None
        if array is None:
            try:
                # .cpu(): the device→host copy for a CUDA tensor; a no-op on the CPU
                array = obj.detach().cpu().numpy()
            except TypeError:  # a dtype NumPy lacks (bfloat16…): torch's own reduction
                return None
            if key is not None:
                seen[key] = array
        where = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        return _restore_tensor, (array, obj.requires_grad, name == "Parameter", where)
    if module.startswith("cupy") and name == "ndarray":
        return _restore_cupy, (obj.get(), f"cuda:{obj.device.id}")
    return None


def _torch_strided():
    import torch

    return torch.strided


def _arrival_device(device: str) -> str:
    """Where a value sent from ``device`` lands here: the same ``cuda:K`` if this process
    has it, else the CPU (the notebook process, a CPU-only worker)."""
    if device == "cpu":
        return "cpu"
    from workbench.devices import cuda_index, gpus_here

    return device if cuda_index(device) < gpus_here() else "cpu"


def _restore_tensor(array, requires_grad: bool = False, parameter: bool = False, device: str = "cpu"):
    import torch

    tensor = torch.from_numpy(array)
    where = _arrival_device(device)
    if where != "cpu":
        tensor = tensor.to(where)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_() if requires_grad else tensor


def _restore_cupy(array, device: str):
    """A CuPy array on ``device`` where this process has that GPU, else the NumPy array."""
    from workbench.kernels.array_module import gpu_available

    if not gpu_available() or _arrival_device(device) == "cpu":
        return array
    import cupy

    from workbench.devices import cuda_index

    with cupy.cuda.Device(cuda_index(device)):
        return cupy.asarray(array)


# Names older pickles (a snapshot taken before this change) refer to.
def _tensor_from_numpy(array, requires_grad: bool = False):
    return _restore_tensor(array, requires_grad)


def _parameter_from_numpy(array, requires_grad: bool):
    return _restore_tensor(array, requires_grad, parameter=True)


#: NumPy arrays up to this size cross a channel as their raw buffer (`_reduce_small_array`)
SMALL_ARRAY_BYTES = 1 << 16


def _reduce_small_array(obj):
    """A small plain NumPy array as (its bytes, dtype, shape), or None for the default.

    NumPy's own reduction costs ~7-14 µs for a 16-element array (a view costs more), this
    ~1 µs, and unpickling 2 µs instead of 3: per-step values are small and many (an actor
    scatters W actions and gathers W observations each step, one message per env replica).
    Only C-contiguous, writable arrays of numeric dtype: the receiver then gets what NumPy's
    own path gives it, a writable C-contiguous array of the same dtype, shape and values.
    Bigger arrays keep NumPy's path, which copies their buffer once, not twice.

        >>> import numpy as np
        >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)[1]  # a view
        >>> b = pickle.loads(dumps(a))
        >>> b.dtype, b.shape, b.tolist(), b.flags.writeable
        (dtype('float32'), (3,), [3.0, 4.0, 5.0], True)
    """
    numpy = sys.modules.get("numpy")  # no NumPy imported: no NumPy arrays to look for
    if numpy is None or type(obj) is not numpy.ndarray:
        return None
    if obj.dtype.kind not in "biufc" or obj.nbytes > SMALL_ARRAY_BYTES:
        return None
    flags = obj.flags
    if not (flags.c_contiguous and flags.writeable):
        return None
    # in-band, a writable PickleBuffer is written as a bytearray: the receiver's array owns it
    return _restore_array, (pickle.PickleBuffer(obj), obj.dtype.str, obj.shape)


def _restore_array(buffer, dtype: str, shape: tuple[int, ...]):
    import numpy

    return numpy.frombuffer(buffer, dtype).reshape(shape)


class _Pickler(pickle.Pickler):
    """pickle, with small NumPy arrays as raw buffers (`_reduce_small_array`), tensors and
    device arrays as host buffers (`_reduce_array_value`); tensors that are one view of one
    storage (a tied embedding's two names in a state dict) go once and arrive tied."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._seen: dict = {}

    def reducer_override(self, obj):
        reduced = _reduce_small_array(obj)
        if reduced is None:
            reduced = _reduce_array_value(obj, self._seen)
        return NotImplemented if reduced is None else reduced


class StatePickler(cloudpickle.Pickler):
    """cloudpickle (a fragment's functions and classes travel by value) with the same
    tensor and device-array path: a PPO learner's state pickles in ~1 ms, not ~3.7 ms."""

    def __init__(self, *args, **kwargs) -> None:
        # cloudpickle's dispatch table is a ChainMap (its reducers over copyreg's), which
        # the C pickler queries for every object it saves: in Python, ~15 % of a learner
        # state's pickling. The same mapping as a dict, taken now, answers in C. Set
        # before Pickler.__init__, which reads it.
        self.dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        super().__init__(*args, **kwargs)
        self._seen: dict = {}  # tensors' host arrays by view (_reduce_array_value)

    def reducer_override(self, obj):
        reduced = _reduce_array_value(obj, self._seen)
        return super().reducer_override(obj) if reduced is None else reduced


def dumps_state(value: Any) -> bytes:
    """Serialise a replica's state (snapshots, exports, deploys): cloudpickle, protocol 5,
    with CPU tensors as their NumPy buffers."""
    buffer = io.BytesIO()
    StatePickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


def dumps(value: Any) -> bytes:
    """Serialise a value for a channel (pickle protocol 5, fast paths for small NumPy
    arrays and for torch tensors)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


class LocalPostman:
    """Delivers to mailboxes in this process without serialising: each target gets its own
    copy of the arrays in the value (:func:`~workbench.runtime.values.arrays.handed_over`), as it
    would from another process, so neither side's later writes reach the other."""

    def __init__(self, boxes: dict[Target, Mailbox]) -> None:
        self.boxes = boxes
        self.bytes_sent = 0

    def send(self, target: Target, key: str, task: int, replica: int, value: Any) -> None:
        self.boxes[target].put(key, task, replica, handed_over(value))

    def close(self) -> None:
        pass


class Peers:
    """What a replica's loop lends the replica: direct channels to the other replicas.

    ``send``/``receive`` move per-step values between groups (scatter/gather across
    replica counts); ``allreduce`` averages a value across the replicas of one group.
    """

    def __init__(
        self, group: str, index: int, mailbox: Mailbox, postman, counts: dict[str, int], stopped: Callable[[], bool]
    ) -> None:
        self.group, self.index = group, index
        self.mailbox, self.postman, self.counts, self.stopped = mailbox, postman, counts, stopped
        self._reductions = 0
        #: group → channel key → rows each replica sent in it last (a scatter back mirrors them)
        self.rows_sent: dict[str, dict[str, tuple[int, ...]]] = {}

    def send(self, consumer_group: str, spatial: str, key: str, tag: int, value: Any) -> None:
        from workbench.fdg.wiring import receivers_for
        from workbench.runtime.values.scatter import split

        targets = receivers_for(spatial, self.index, self.counts[consumer_group])
        pieces = (
            split(value, self.counts[consumer_group], self.rows_sent.get(consumer_group))
            if spatial == "scatter"
            else None
        )  # each replica its own rows: the gather's mirror
        for target in targets:
            part = pieces[target] if pieces is not None else value
            self.postman.send((consumer_group, target), key, tag, self.index, part)

    def receive(self, producer_group: str, spatial: str, key: str, tag: int) -> Any:
        from workbench.fdg.wiring import senders_for
        from workbench.runtime.values.arrays import gather, unwrapped
        from workbench.runtime.values.scatter import note_rows

        senders = senders_for(spatial, self.index, self.counts[producer_group])
        # one wait for every sender's value: this thread wakes once, when the last is in
        values = self.mailbox.take_all(key, tag, senders, self.stopped)
        if spatial != "gather":
            return unwrapped(values[0])
        note_rows(self.rows_sent, producer_group, key, values)  # what a scatter back mirrors
        return gather(values, 0)

    #: arrays of at least this many bytes are averaged in chunks (bytes per replica flat
    #: in the replica count), smaller values by a direct exchange: see collectives
    chunked_min_bytes = CHUNKED_MIN_BYTES

    def allreduce(self, value: Any) -> Any:
        """The mean of ``value`` over this group's replicas, identical on every replica
        bit for bit (:mod:`workbench.runtime.values.allreduce`: big arrays in chunks, each
        replica sending under 2× the value's bytes whatever the replica count)."""
        count = self.counts[self.group]
        if count == 1:
            return value
        reduction, self._reductions = self._reductions, self._reductions + 1
        key = f"allreduce:{self.group}"
        ctx = current()
        iteration = ctx.iteration if ctx is not None else None  # each part says whose it is

        def send(to: int, tag: int, part: Any) -> None:
            self.postman.send((self.group, to), key, tag, self.index, (iteration, part))

        def take(sender: int, tag: int) -> Any:
            theirs, part = self.mailbox.take(key, tag, sender, self.stopped)
            if theirs != iteration:  # a replica that reduced once more or less last iteration
                raise other_iteration(self.index, iteration, sender, theirs)
            return part

        return allreduce(value, self.index, count, reduction, send, take, chunked_min_bytes=self.chunked_min_bytes)


class SocketServer:
    """Accepts connections from other replicas' postmen and files what they send; with
    ``tls``, only over TLS from peers holding a certificate of the cluster's CA."""

    def __init__(
        self,
        mailbox: Mailbox,
        host: str,
        authkey: bytes,
        tls: ChannelTLS | None = None,
        routes: dict[Target, Mailbox] | None = None,
    ) -> None:
        self.mailbox = mailbox
        # the mailboxes of the other replicas in this process, by target: a postman sends
        # everything for this process over one connection to one of its servers, saying
        # with a route frame whose mailbox the frames after it are for (socket_postman)
        self._routes = routes if routes is not None else {}
        self._route: dict[Any, Mailbox] = {}
        self._raw = RawJoiner()  # see workbench.runtime.transport.raw_frames
        self._authkey = authkey
        self.tls = tls
        # A deep backlog, and the HMAC handshake in each connection's reader thread rather
        # than in accept: with multiprocessing's backlog of 1 and handshakes done one at a
        # time, 8+ replicas connecting at once (snapshots to the driver) overflowed the
        # accept queue, and a connection the kernel dropped left its sender waiting for a
        # challenge forever (Fine at 8 workers stalled at iteration 0; issue 15).
        self._listener = wire.listen(host, BACKLOG)
        self.address: Address = self._listener.getsockname()[:2]
        self._conns: list = []
        self._closed = False
        self._threads: list[threading.Thread] = []
        # plain connections past their handshake are read by one thread (see FrameReader:
        # a thread per connection cost the single actor of Fine a wake-up per env replica
        # and step); TLS ones keep a reader thread each (an SSL socket buffers what select
        # cannot see)
        self._frames = FrameReader(self._file, self._ended)
        self._threads.append(self._frames.thread)
        self._start(self._accept, name="workbench-channel-accept")

    def _start(self, target, *args, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = wire.accept(self._listener, self.tls)
            except Exception:  # listener closed
                if self._closed:
                    return
                continue
            if self._closed:  # the connection close() made to wake this thread
                _close_quietly(conn)
                return
            self._conns.append(conn)
            self._threads = [t for t in self._threads if t.is_alive()]  # probes come and go
            self._start(self._read, conn, name="workbench-channel-read")

    def _read(self, conn) -> None:
        # the handshake reads block with no timeout of their own: a peer that goes silent
        # half-way would hold this thread until the server closes (a run can last days)
        passed = threading.Event()
        deadline = threading.Timer(HANDSHAKE_TIMEOUT_S, lambda: passed.is_set() or _shut_down(conn))
        deadline.daemon = True
        deadline.start()
        try:
            wire.handshake(conn)  # TLS: a peer without the cluster's certificates fails here
            deliver_challenge(conn, self._authkey)
            answer_challenge(conn, self._authkey)
            passed.set()
        except Exception:  # a peer without the run's key, one that hung up (a probe), or too slow
            if conn in self._conns:  # probes recur in a long run: keep no trace of them
                self._conns.remove(conn)
            _close_quietly(conn)
            return
        finally:
            deadline.cancel()
        if not isinstance(conn, wire.FramedSocket) and os.name == "posix":  # (os.read on a socket)
            self._frames.add(conn)  # read from now on with every other plain connection
            self._lend_reader()
            return
        try:
            while True:
                try:
                    message = conn.recv_bytes()
                except (EOFError, OSError, TypeError):  # the peer closed it, or we did (TypeError: mid-read)
                    return
                try:
                    self._file(message, conn)
                except StopReading:
                    return
        finally:
            self._route.pop(conn, None)

    def _lend_reader(self) -> None:
        """Let the waits of the mailboxes this server files into read its connections in
        their own thread (:mod:`workbench.runtime.transport.frame_reader`): every replica of the
        process, since postmen reach them all through one server (the gateway)."""
        for box in (self.mailbox, *self._routes.values()):
            if isinstance(box, Mailbox) and (box.reader is None or not box.reader.streams):
                box.reader = self._frames

    def _file(self, message, conn) -> None:
        """Unpickle one message and put it in the mailbox (a big byte string, its own frame)."""
        box = self._route.get(conn, self.mailbox)
        try:
            if self._raw.pending(conn):  # the bytes of the message before: not a pickle
                box.put(*self._raw.complete(message, conn))
                return
            parts = pickle.loads(message)
            if len(parts) == 2 and parts[0] == ROUTE:  # the messages that follow are for this replica
                self._route[conn] = self._routes.get(parts[1], self.mailbox)
                return
            parts = self._raw.take(parts, conn)
            if parts is None:
                return
            key, task, replica, value = parts
        except Exception as exc:
            # e.g. a class the receiver cannot import, a CUDA value without CUDA: the
            # replica waiting for it gets this error (not a "stalled" run later on)
            exc.add_note(f"while unpickling a {len(message)}-byte value another replica sent over a workbench channel")
            box.fail(exc)
            raise StopReading() from None
        box.put(key, task, replica, value)

    def _ended(self, conn) -> None:
        """A plain connection the peer closed (or that broke): forget it."""
        if conn in self._conns:
            self._conns.remove(conn)
        self._route.pop(conn, None)
        _close_quietly(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # unblock the accept thread: it returns for this connection and sees _closed
            socket.create_connection(self.address, timeout=1.0).close()  # no handshake to wait for
        except OSError:
            pass
        self._listener.close()
        self._frames.close(CLOSE_JOIN_S)  # first: it reads the connections closed below
        for conn in list(self._conns):
            _shut_down(conn)
            _close_quietly(conn)
        # Join, so a run's end leaves no thread behind (a worker hosts runs for hours). A
        # reader blocked in recv wakes at the shutdown above; the bound only guards against
        # a thread stuck somewhere else, which stays a daemon.
        deadline = time.monotonic() + CLOSE_JOIN_S
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


def _shut_down(conn) -> None:
    """Wake a thread blocked reading ``conn``: on Linux closing a socket's descriptor does
    not interrupt a ``recv`` in another thread, a ``shutdown`` does."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:  # already closed
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def _close_quietly(conn) -> None:
    """Close a connection another thread may be closing too (a reader whose handshake
    failed while the server shuts down): the second close finds the descriptor gone."""
    try:
        conn.close()
    except OSError:
        pass
