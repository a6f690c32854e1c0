"""``wb.allreduce`` over torch.distributed: a run's learner replicas as one process group.

The channels (:mod:`workbench.runtime.values.allreduce` over mailboxes and sockets) are one
transport for the gradient all-reduce; torch.distributed is the other — NCCL for CUDA
tensors (GPU to GPU, over NVLink or InfiniBand where they exist), gloo for CPU tensors.
``RunConfig.allreduce`` (``fdg.run(allreduce=…)``, ``--allreduce``) picks one per run:

- ``"auto"`` (the default): NCCL when the group is placed on GPUs and every replica's tensor
  is CUDA, on a GPU of its own, with NCCL available, on a cluster without TLS; the channels
  otherwise. A group placed on CPUs never touches torch.distributed.
- ``"channels"``: always the channels.
- ``"torch"``: always torch.distributed: NCCL where ``auto`` would pick it, else gloo (a
  CUDA tensor then goes through the host).

Every transport gives the same mean, bit for bit (:func:`~workbench.runtime.values.allreduce.torch_allreduce`),
so the choice changes speed, never results.

A group forms once per stretch (a run, or its part between two re-placements), at the
first tensor the replicas reduce:

1. each replica sends every other a :class:`Hello` over the run's channels (worker, host,
   its tensor's device, NCCL); all choose alike from the same hellos (:func:`choose`);
2. replica 0 hosts a ``TCPStore`` on its worker's channel address, on a port the OS picks,
   and sends the port and a token over the channels: no MASTER_ADDR or MASTER_PORT to set;
3. each replica builds its own ``ProcessGroupGloo``/``ProcessGroupNCCL`` over that store
   (never torch's global default group: several runs and replicas can share a process).

A watcher closes the group when the loop that formed it ends (the run's end, a stop, a
re-placement all end it) or the run is stopped, so a later stretch forms a fresh one. When
a worker dies, its ranks die with it and the others' collectives fail at once; they then
wait, as on the channels, for the driver to stop the run and re-place it
(:data:`BROKEN_GRACE_S`). A group that cannot form fails the run with a
:class:`~workbench.errors.ProcessGroupError` naming the replicas, their workers and the fix.

Example (a stretch's reducer, as ``GroupReplica.run`` installs it)::

    ctx.reducer = allreduce_for(replica)      # wb.allreduce(x) → reducer(x)
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import threading
import time
import weakref
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

from workbench.config import ALLREDUCE_BACKENDS
from workbench.errors import ProcessGroupError
from workbench.loaded_modules import loaded
from workbench.runtime.transport.channels import LocalPostman, Stopped
from workbench.runtime.values.allreduce import torch_allreduce, torch_payload_bytes

__all__ = ["BACKENDS", "Hello", "choose", "TorchGroup", "host_store", "Reducer", "allreduce_for", "open_groups"]

#: the values of ``RunConfig.allreduce``
BACKENDS = ALLREDUCE_BACKENDS
#: how long joining the store and connecting the group may take, once every replica has
#: reached the sync point (the hellos make sure of that): a network question, not a wait
#: for slow peers
RENDEZVOUS_TIMEOUT_S = 60.0
#: how long one collective waits for a peer (torch's default); a stop interrupts the wait
COLLECTIVE_TIMEOUT_S = 1800.0
#: after a collective failed (a peer's connection closed), how long to wait for the run to
#: be stopped for a lost worker before calling it this group's own error
BROKEN_GRACE_S = 15.0
POLL_S = 0.05
WATCH_S = 0.2
_SLICE = datetime.timedelta(seconds=POLL_S)
_SLICE_OVER = "Operation timed out!"  # what a sliced Work.wait says when the slice ends
_KEY = "wb:allreduce-group"

_open: set = set()  # the TorchGroups open in this process
_open_lock = threading.Lock()
_reducers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Peers → Reducer
_reducers_lock = threading.Lock()


@dataclass(frozen=True)
class Hello:
    """What a replica tells the others before a group forms."""

    replica: int
    worker: str
    host: str
    cuda: bool = False  # its tensor is on a GPU
    gpu: str | None = None  # that GPU's UUID: NCCL refuses two ranks on one GPU
    nccl: bool = False
    tls: bool = False  # the run's channels use TLS (gloo and NCCL do not encrypt)


def choose(mode: str, hellos: list[Hello]) -> str:
    """``"channels"``, ``"nccl"`` or ``"gloo"`` for ``mode`` (one of :data:`BACKENDS`)
    given every replica's hello: each replica computes it alike.

    >>> gpu = [Hello(0, "w0", "h0", True, "GPU-a", True), Hello(1, "w1", "h1", True, "GPU-b", True)]
    >>> choose("auto", gpu), choose("torch", gpu), choose("channels", gpu)
    ('nccl', 'nccl', 'channels')
    >>> shared = [Hello(0, "w0", "h0", True, "GPU-a", True), Hello(1, "w1", "h0", True, "GPU-a", True)]
    >>> cpu = [Hello(0, "w0", "h0"), Hello(1, "w1", "h1")]
    >>> choose("auto", shared), choose("torch", shared), choose("auto", cpu), choose("torch", cpu)
    ('channels', 'gloo', 'channels', 'gloo')
    """
    if mode == "channels":
        return "channels"
    gpus = [h.gpu for h in hellos]
    nccl = all(h.cuda and h.nccl and h.gpu for h in hellos) and len(set(gpus)) == len(gpus)
    if mode == "auto":
        return "nccl" if nccl and not any(h.tls for h in hellos) else "channels"
    return "nccl" if nccl else "gloo"


def host_store(host: str, count: int) -> tuple[Any, int]:
    """A ``TCPStore`` server for ``count`` ranks listening on ``host`` only (torch's own
    would listen on every interface), on a port the OS picks: (store, port)."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family, backlog=max(128, count)) as listener:
        port = listener.getsockname()[1]
        # the store takes a descriptor of its own and closes it when it goes (or fails);
        # the long timeout bounds this rank's own waits on the store, which NCCL uses for
        # as long as the group lives
        store = dist.TCPStore(
            host,
            port,
            count,
            True,
            datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
            wait_for_workers=False,
            master_listen_fd=os.dup(listener.fileno()),
        )
    return store, port


class TorchGroup:
    """This process's rank ``index`` of a ``count``-rank gloo or NCCL process group.

    Example, one rank (see tests/runtime/test_collectives_torch.py for several)::

        store, port = host_store("127.0.0.1", 1)
        group = TorchGroup.form("gloo", 0, 1, "127.0.0.1", "127.0.0.1", port, "token", store=store)
        group.allreduce(torch.ones(3), stopped=lambda: False)   # tensor([1., 1., 1.])
        group.close()
    """

    def __init__(self, kind: str, backend: Any, store: Any, index: int, count: int) -> None:
        self.kind, self.backend, self.index, self.count = kind, backend, index, count
        self._store = store
        #: an interrupted collective leaves the ranks out of step: no further use
        self.broken = False
        with _open_lock:
            _open.add(self)

    @classmethod
    def form(
        cls,
        kind: str,
        index: int,
        count: int,
        host: str,
        store_host: str,
        port: int,
        token: str,
        *,
        device: Any = None,
        store: Any = None,
    ) -> "TorchGroup":
        """Join the store at ``store_host:port`` (replica 0 passes the ``store`` it hosts)
        and build the group, its gloo transport bound to ``host`` (this worker's address);
        NCCL's communicator is made now on ``device``, not at the first collective."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S)
        if store is None:
            store = dist.TCPStore(store_host, port, count, False, timeout)
        prefixed = dist.PrefixStore(f"workbench/{token}/", store)
        if kind == "gloo":
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
            backend = dist.ProcessGroupGloo(prefixed, index, count, options)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            backend = dist.ProcessGroupNCCL(prefixed, index, count, options)
            if device is not None:
                backend.eager_connect_single_device(device)
        # connecting had the rendezvous timeout; a collective waits for peers far longer
        if hasattr(backend, "_set_default_timeout"):
            backend._set_default_timeout(datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        return cls(kind, backend, store, index, count)

    def allreduce(self, value: Any, stopped: Callable[[], bool], iteration: int | None = None) -> Any:
        """The mean of tensor ``value`` over the group (the channels' bits), taken in
        ``iteration`` on every rank; raises :class:`Stopped` if ``stopped()`` turns true
        while a collective waits."""
        if self.broken or self.backend is None:
            raise RuntimeError("this process group was closed or interrupted")

        def wait(work) -> None:
            # a stop must end a wait for a peer that never comes, and gloo cannot be
            # interrupted: so wait in slices (gloo's op goes on after a sliced wait times
            # out); NCCL's wait with a timeout would abort its communicator, so it polls
            if self.kind == "gloo":
                while True:
                    try:
                        work.wait(_SLICE)
                        return
                    except RuntimeError as exc:
                        if not str(exc).startswith(_SLICE_OVER):
                            raise  # the collective's own error (a peer gone, its timeout)
                    if stopped():
                        self.broken = True
                        raise Stopped()
            pause = 0.0
            while not work.is_completed():
                if stopped():
                    self.broken = True
                    raise Stopped()
                time.sleep(pause)
                pause = min(POLL_S, pause * 2 or 1e-5)
            work.wait()  # raises the collective's error, if it failed

        import torch

        on_gpu = value.device.type == "cuda"
        with torch.cuda.device(value.device) if on_gpu else nullcontext():
            try:
                return torch_allreduce(
                    value,
                    self.index,
                    self.count,
                    self.backend,
                    wait,
                    host_copy=on_gpu and self.kind == "gloo",
                    iteration=iteration,
                )
            except (Stopped, ValueError):  # ValueError: shapes differ, said alike on every rank
                raise
            except BaseException:
                self.broken = True
                raise

    def close(self) -> None:
        """Drop the group and the store (ranks still waiting on this one
        get "connection closed"). May block while a collective this rank abandoned is
        still in flight: call it off the loop's thread."""
        with _open_lock:
            _open.discard(self)
        backend, self.backend = self.backend, None
        if backend is not None and self.kind == "nccl":
            try:
                backend.abort()  # NCCL does not end its communicators on its own
            except Exception:
                pass
        del backend  # gloo closes its connections as the last reference goes
        self._store = None  # replica 0's: its server stops


def open_groups(kind: str | None = None) -> int:
    """How many process groups (of ``kind``, "gloo" or "nccl") this process holds open:
    0 between runs."""
    with _open_lock:
        return sum(1 for g in _open if kind in (None, g.kind))


def allreduce_for(replica) -> Callable[[Any], Any]:
    """The ``wb.allreduce`` of ``replica`` for the stretch its loop runs: one
    :class:`Reducer` per stretch (per ``replica.peers``)."""
    peers = replica.peers
    with _reducers_lock:
        reducer = _reducers.get(peers)
        if reducer is None:
            mode = getattr(replica.program, "allreduce", "auto")
            reducer = _reducers[peers] = Reducer(peers, mode, str(replica.worker), str(replica.device))
    return reducer


class Reducer:
    """``wb.allreduce`` for one replica's stretch: the channels, or a process group formed
    at the first tensor (see the module docstring)."""

    def __init__(self, peers, mode: str, worker: str, device: str) -> None:
        self._peers = weakref.ref(peers)  # the loop owns it; its end ends this reducer
        self.group, self.index, self.count = peers.group, peers.index, peers.counts[peers.group]
        self.mailbox, self.postman, self.stopped = peers.mailbox, peers.postman, peers.stopped
        self.mode, self.worker, self.device = mode, worker, device
        #: "channels", "gloo" or "nccl" once chosen; None before the first tensor
        self.path: str | None = None
        self.hellos: list[Hello] = []
        self.torch_group: TorchGroup | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, value: Any) -> Any:
        wants = self.mode == "torch" or (self.mode == "auto" and self.device.startswith("cuda"))
        if wants and self.path != "channels" and _is_tensor(value):
            if self.path is None:
                self._form(value)
            if self.path != "channels":
                return self._over_torch(value)
        peers = self._peers()
        if peers is None:  # the loop has ended: nothing waits for this value
            raise Stopped()
        return peers.allreduce(value)

    # -- forming ---------------------------------------------------------------------
    def _form(self, value: Any) -> None:
        mine = Hello(
            self.index,
            self.worker,
            self._host(self.index),
            value.device.type == "cuda",
            _gpu_id(value),
            _nccl_available(),
            getattr(self.postman, "tls", None) is not None,
        )
        self.hellos = self._exchange(0, mine)
        path = choose(self.mode, self.hellos)
        if path != "channels":
            self.torch_group = self._rendezvous(path, value)
            threading.Thread(
                target=self._watch, args=(threading.current_thread(),), daemon=True, name=f"workbench-{path}-watch"
            ).start()
        self.path = path

    def _exchange(self, tag: int, mine: Any) -> list:
        """Send ``mine`` to every other replica; every replica's, in replica order."""
        for other in range(self.count):
            if other != self.index:
                self.postman.send((self.group, other), _KEY, tag, self.index, mine)
        return [mine if r == self.index else self.mailbox.take(_KEY, tag, r, self.stopped) for r in range(self.count)]

    def _rendezvous(self, path: str, value: Any) -> TorchGroup:
        first = self.hellos[0]
        store = None
        if self.index == 0:
            try:
                store, port = host_store(first.host, self.count)
                offer = {"port": port, "token": secrets.token_hex(8)}
            except Exception as exc:
                offer = {
                    "error": f"replica 0 on worker {self.worker} could not host the rendezvous store "
                    f"on {first.host} ({_first_line(exc)})"
                }
            for other in range(1, self.count):
                self.postman.send((self.group, other), _KEY, 1, 0, offer)
        else:
            offer = self.mailbox.take(_KEY, 1, 0, self.stopped)
        if "error" in offer:
            raise self._cannot_form(path, offer["error"])
        device = value.device if path == "nccl" else None
        try:
            return _in_background(
                lambda: TorchGroup.form(
                    path,
                    self.index,
                    self.count,
                    self._host(self.index),
                    first.host,
                    offer["port"],
                    offer["token"],
                    device=device,
                    store=store,
                ),
                self.stopped,
            )
        except Stopped:
            raise
        except Exception as exc:
            raise self._cannot_form(
                path,
                (
                    f"replica {self.index} on worker {self.worker} could not connect to the other replicas "
                    f"through the rendezvous store that replica 0 hosts on worker {first.worker} at "
                    f"{first.host}:{offer['port']} within {RENDEZVOUS_TIMEOUT_S:g} s ({_first_line(exc)})"
                ),
            ) from None

    def _cannot_form(self, path: str, why: str) -> ProcessGroupError:
        return ProcessGroupError(
            f"wb.allreduce over torch.distributed ({path}) could not form the process group of the "
            f"{self.count} replicas of {self.group!r} ({self._who()}): {why}. torch.distributed opens "
            "its own TCP connections between these workers, beside workbench's channels, so every "
            "replica's worker must reach replica 0's worker on any port (check the firewalls and routes "
            "between them). Or run with allreduce='channels' (--allreduce channels): the same average "
            "over workbench's own channels."
        )

    # -- reducing --------------------------------------------------------------------
    def _over_torch(self, value: Any) -> Any:
        with self._lock:
            group = self.torch_group
            if group is None or self._closed:
                raise Stopped()  # closed by the watcher: the run stopped or the loop ended
            try:
                result = group.allreduce(value, self.stopped, _iteration_now())
                if not isinstance(self.postman, LocalPostman):
                    # the run's "bytes sent to other processes" (wire/bytes) counts the
                    # channels' postman: add what went through the group instead
                    self.postman.bytes_sent += torch_payload_bytes(value, self.count)
                return result
            except (Stopped, ValueError):
                raise
            except Exception as exc:
                # a peer's process died or its connection was cut: like the channels, leave
                # it to the driver, which stops the run and re-places it after a lost worker
                if _wait_for(self.stopped, BROKEN_GRACE_S):
                    raise Stopped() from None
                raise ProcessGroupError(
                    f"wb.allreduce over torch.distributed ({self.path}): the process group of the "
                    f"{self.count} replicas of {self.group!r} ({self._who()}) broke during a reduction on "
                    f"replica {self.index}: {_first_line(exc)}. No worker was lost within "
                    f"{BROKEN_GRACE_S:g} s; a connection between these workers was cut or a collective timed "
                    "out. Run again, or with allreduce='channels' (--allreduce channels)."
                ) from None

    # -- closing ---------------------------------------------------------------------
    def _watch(self, loop: threading.Thread) -> None:
        while loop.is_alive() and not self.stopped() and self._peers() is not None:
            loop.join(WATCH_S)
        self.close()

    def close(self) -> None:
        """Close the group (waits for a collective in progress to notice the stop)."""
        with self._lock:
            self._closed = True
            group, self.torch_group = self.torch_group, None
        if group is not None:
            group.close()

    def _host(self, index: int) -> str:
        """Where replica ``index``'s channels listen: its worker's address (loopback in one
        process, where there are no sockets)."""
        addresses = getattr(self.postman, "addresses", None) or {}
        address = addresses.get((self.group, index))
        return address[0] if address else "127.0.0.1"

    def _who(self) -> str:
        return ", ".join(f"replica {h.replica} on worker {h.worker} ({h.host})" for h in self.hellos)


def _iteration_now() -> int | None:
    """The iteration of the cell calling ``wb.allreduce`` (every rank's must be the same)."""
    from workbench.context import current

    ctx = current()
    return ctx.iteration if ctx is not None else None


def _is_tensor(value: Any) -> bool:
    torch = loaded("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.layout == torch.strided


def _gpu_id(value: Any) -> str | None:
    if value.device.type != "cuda":
        return None
    import torch

    try:
        return str(torch.cuda.get_device_properties(value.device).uuid)
    except Exception:  # no UUID from this driver: NCCL cannot be told safe
        return None


def _nccl_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_nccl_available()


def _first_line(exc: BaseException) -> str:
    """A C++ error's first line (torch appends its C++ stack)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition()`` turns true within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _in_background(work: Callable[[], TorchGroup], stopped: Callable[[], bool]) -> TorchGroup:
    """``work()`` in a thread of its own, so that a stop is seen while it blocks in C++; a
    group it forms after the stop is closed."""
    box: dict[str, Any] = {}
    lock, done = threading.Lock(), threading.Event()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        else:
            with lock:
                if box.get("abandoned"):
                    result.close()
                else:
                    box["result"] = result
        done.set()

    threading.Thread(target=run, daemon=True, name="workbench-process-group-form").start()
    while not done.wait(POLL_S):
        if stopped():
            with lock:
                box["abandoned"] = True
                if "result" not in box:
                    raise Stopped()
            break
    if "error" in box:
        raise box["error"]
    return box["result"]
