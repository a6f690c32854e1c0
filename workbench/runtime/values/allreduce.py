"""The all-reduce behind ``wb.allreduce``: the mean of a value over a group's replicas.

Three algorithms, one contract — the mean (the sum divided by N) with the value's shape,
dtype and device, identical bit for bit on every replica and the same run to run (``wb.allreduce``
hands them floats: :func:`workbench.context.reducible` turns integers into the floats of their mean first):

- :func:`direct_allreduce` — every replica sends its whole value to every other and sums
  in replica order: one message latency, but (N−1)·B bytes sent per replica for a value
  of B bytes, O(N²) on the wire per reduction.
- :func:`scatter_allreduce` — the flattened value cut into N chunks; replica k gathers
  everyone's share of chunk k, sums it (in replica order) and sends the finished chunk to
  every other: a reduce-scatter and an all-gather of one step each, 2·(N−1)/N·B bytes
  per replica (under 2·B whatever N) over two message latencies, and bit for bit the
  direct exchange's result.
- :func:`ring_allreduce` — the same chunks passed around a ring (Patarasuk & Yuan's
  bandwidth-optimal ring, as in NCCL and Horovod): the same bytes, but 2·(N−1) latencies
  in sequence, and each replica talks to its two neighbours only.

:func:`allreduce` sends an array of at least :data:`CHUNKED_MIN_BYTES` on at least
:data:`CHUNKED_MIN_REPLICAS` replicas by ``scatter`` (or ``ring`` when asked), anything
else (floats, 0-d and small arrays) by the direct exchange. On the channels' sockets the
scatter beat the ring at every size on 4 and 8 replicas (1 KB–10 MB, up to 8× at 37 KB:
``benchmarks/bench_allreduce.py``, docs/clusters.md "All-reduce"): between processes the
ring's sequential latencies cost more than a mesh of connections does. Every replica decides
from its own value, so a group's replicas must pass values of one shape and dtype, as
one network's gradients are; a shape that differs raises ``ValueError``.

:func:`torch_allreduce` computes the same mean, bit for bit, with a torch.distributed
process group (gloo, NCCL) as the transport instead of mailboxes: what
``allreduce="torch"`` runs (:mod:`workbench.runtime.transport.process_group` forms the group).

The channels' transport is two callables, so this module knows nothing of mailboxes or sockets:
``send(to, tag, value)`` delivers a value to replica ``to``, and ``take(sender, tag)``
blocks for the one ``sender`` sent under ``tag`` (raising ``Stopped`` if the run stops).
A reduction uses the :func:`tags_per_reduction` tags from ``reduction ×
tags_per_reduction``, so the tags of consecutive reductions and of the two phases never
collide, and each sender's tags only grow (the mailbox drops versions older than the one
taken).

Example, three replicas in threads:
    >>> import threading
    >>> import numpy as np
    >>> from workbench.runtime.transport.channels import LocalPostman, Mailbox
    >>> boxes = {r: Mailbox() for r in range(3)}
    >>> post = LocalPostman(boxes)
    >>> def reduce(r, out):
    ...     send = lambda to, tag, v: post.send(to, "g", tag, r, v)
    ...     take = lambda sender, tag: boxes[r].take("g", tag, sender, lambda: False)
    ...     out[r] = allreduce(np.full(5, float(r)), r, 3, 0, send, take, chunked_min_bytes=0)
    >>> out = {}
    >>> threads = [threading.Thread(target=reduce, args=(r, out)) for r in range(3)]
    >>> for t in threads: t.start()
    >>> for t in threads: t.join()
    >>> out[0].tolist(), all((out[r] == out[0]).all() for r in range(3))
    ([1.0, 1.0, 1.0, 1.0, 1.0], True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.context import reducible  # re-exported: its home is beside wb.allreduce
from workbench.runtime.values.arrays import _is_cupy, _is_torch

__all__ = [
    "allreduce",
    "reducible",
    "other_iteration",
    "direct_allreduce",
    "scatter_allreduce",
    "ring_allreduce",
    "torch_allreduce",
    "torch_payload_bytes",
    "tags_per_reduction",
    "CHUNKED_MIN_BYTES",
    "CHUNKED_MIN_REPLICAS",
]

#: the smallest array (in bytes) that is sent in chunks. Chosen so the quickstart PPO's
#: 37 KB gradient is (flat bytes per learner, issue 15), and so a chunk's ~220-byte
#: message header stays near 10% of its payload at 8 replicas. On one 2-core machine's
#: loopback, where bytes are cheap, the direct exchange is still faster in seconds up to
#: ~128 KB and 2–9× slower from 1 MB (docs/clusters.md, "All-reduce"); across machines
#: it is the bytes that cost.
CHUNKED_MIN_BYTES = 16 * 1024
#: the fewest replicas that send chunks: at 2 every algorithm sends B bytes per replica
CHUNKED_MIN_REPLICAS = 3
ALGORITHMS = ("scatter", "ring")

Send = Callable[[int, int, Any], None]  # (to replica, tag, value)
Take = Callable[[int, int], Any]  # (from replica, tag) -> value, blocking


def other_iteration(index: int, mine: Any, sender: int, theirs: Any) -> ValueError:
    """The error for a reduction whose replicas are in different iterations: they called
    ``wb.allreduce`` a different number of times, so its values would mix iterations."""
    return ValueError(
        f"wb.allreduce: replica {index} is in iteration {mine} but replica {sender} sent its value for the "
        f"same reduction from iteration {theirs}: the replicas of this fragment called wb.allreduce a "
        "different number of times in an iteration, so their values would be averaged across iterations. "
        "Every replica must call it the same number of times each iteration: decide an early stop "
        "together (average what it tests, e.g. the KL, with wb.allreduce and stop on the mean)."
    )


def tags_per_reduction(count: int) -> int:
    """How many tags one reduction over ``count`` replicas may use (the ring's steps)."""
    return max(2, 2 * (count - 1))


def allreduce(
    value: Any,
    index: int,
    count: int,
    reduction: int,
    send: Send,
    take: Take,
    chunked_min_bytes: int = CHUNKED_MIN_BYTES,
    chunked_min_replicas: int = CHUNKED_MIN_REPLICAS,
    algorithm: str = "scatter",
) -> Any:
    """The mean of ``value`` over ``count`` replicas (this one is ``index``); ``reduction``
    numbers this reduction (0, 1, 2… on every replica alike) and fixes its tags;
    ``algorithm`` (``"scatter"`` or ``"ring"``) is how arrays of ``chunked_min_bytes`` or
    more travel on ``chunked_min_replicas`` or more replicas."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce: algorithm must be one of {ALGORITHMS}, got {algorithm!r}.")
    if count == 1:
        return value
    base = reduction * tags_per_reduction(count)
    size = array_bytes(value)
    if size is not None and size >= chunked_min_bytes and count >= chunked_min_replicas:
        chunked = ring_allreduce if algorithm == "ring" else scatter_allreduce
        return chunked(value, index, count, base, send, take)
    return direct_allreduce(value, index, count, base, send, take)


def direct_allreduce(value: Any, index: int, count: int, tag: int, send: Send, take: Take) -> Any:
    """Every replica sends ``value`` to every other and sums in replica order (so
    floating-point rounding agrees everywhere): one latency, (N−1)·B bytes per replica.
    Any value with ``+`` and ``/`` (floats, arrays, tensors)."""
    for other in range(count):
        if other != index:
            send(other, tag, value)
    parts = [value if r == index else _received(take(r, tag), value, r, index) for r in range(count)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total / count


def scatter_allreduce(value: Any, index: int, count: int, tag: int, send: Send, take: Take) -> Any:
    """Reduce-scatter then all-gather, each in one step of direct messages: replica ``k``
    receives everyone's share of chunk ``k``, sums them in replica order, divides, and
    sends the finished chunk to every other. 2·(N−1)/N·B bytes per replica, as the ring,
    over two message latencies instead of 2·(N−1); and bit for bit the direct exchange's
    result (each element summed in the same order). Uses tags ``tag`` and ``tag + 1``.
    The result is a new array of ``value``'s shape on its device (a tensor without
    autograd history: a gradient sync point)."""
    flat = _flatten(value)
    size = flat.shape[0]
    bounds = [size * k // count for k in range(count + 1)]
    chunks = [flat[bounds[k] : bounds[k + 1]] for k in range(count)]
    for other in range(count):
        if other != index:
            send(other, tag, chunks[other])
    total = None
    for r in range(count):
        share = chunks[index] if r == index else _received(take(r, tag), chunks[index], r, index, value)
        total = share if total is None else total + share
    chunks[index] = total / count
    for other in range(count):
        if other != index:
            send(other, tag + 1, chunks[index])
    for r in range(count):
        if r != index:
            chunks[r] = _received(take(r, tag + 1), chunks[r], r, index, value)
    return _join(chunks, value)


def ring_allreduce(value: Any, index: int, count: int, tag: int, send: Send, take: Take) -> Any:
    """The ring all-reduce of an array (NumPy, CuPy, or a torch tensor on any device),
    using tags ``tag … tag + 2(count−1) − 1``. The result is a new array of ``value``'s
    shape on its device (a tensor without autograd history: a gradient sync point)."""
    flat = _flatten(value)
    size = flat.shape[0]
    bounds = [size * k // count for k in range(count + 1)]  # a value smaller than N: empty chunks
    chunks = [flat[bounds[k] : bounds[k + 1]] for k in range(count)]
    right, left = (index + 1) % count, (index - 1) % count
    # Reduce-scatter: at step s, pass on the partial sum of chunk (index − s) and add this
    # replica's share to the partial of chunk (index − s − 1) arriving from the left.
    for step in range(count - 1):
        send(right, tag + step, chunks[(index - step) % count])
        k = (index - step - 1) % count
        chunks[k] = _received(take(left, tag + step), chunks[k], left, index, value) + chunks[k]
    # Chunk index + 1 now holds all N shares, summed in one order, here only: finish the
    # mean here, so the division too happens once, and every replica copies these bits.
    owned = (index + 1) % count
    chunks[owned] = chunks[owned] / count
    # All-gather: pass each finished chunk on around the ring.
    for step in range(count - 1):
        at = tag + count - 1 + step
        send(right, at, chunks[(index + 1 - step) % count])
        k = (index - step) % count
        chunks[k] = _received(take(left, at), chunks[k], left, index, value)
    return _join(chunks, value)


def array_bytes(value: Any) -> int | None:
    """The bytes of an array that can be cut into chunks, or None (a float, a sparse or
    object array, a container): those take the direct exchange."""
    if isinstance(value, np.ndarray):
        return value.nbytes if value.dtype != object else None
    if _is_torch(value) and hasattr(value, "numel") and hasattr(value, "layout"):
        import torch

        return value.numel() * value.element_size() if value.layout is torch.strided else None
    if _is_cupy(value) and hasattr(value, "nbytes"):
        return value.nbytes
    return None


def _flatten(value: Any) -> Any:
    """A 1-D view (or copy, when not contiguous) of the array's elements. Chunks are
    slices of it, never written to: sums make new arrays."""
    if _is_torch(value):
        return value.detach().reshape(-1)
    return value.reshape(-1)  # NumPy and CuPy alike


def _join(chunks: list[Any], like: Any) -> Any:
    if _is_torch(like):
        import torch

        return torch.cat(chunks).reshape(like.shape)
    if _is_cupy(like):
        import cupy

        return cupy.concatenate(chunks).reshape(like.shape)
    return np.concatenate(chunks).reshape(like.shape)


def _received(part: Any, like: Any, sender: int, index: int, value: Any = None) -> Any:
    """What ``sender`` sent, checked against this replica's own ``like`` (its value, or
    the chunk of its ``value`` that it stands for) and moved onto its device (another
    learner's gradients arrive on the CPU when this process lacks the GPU they left, or on
    another GPU; summing needs one device)."""
    mine, theirs = getattr(like, "shape", None), getattr(part, "shape", None)
    if mine is not None and theirs is not None and tuple(mine) != tuple(theirs):
        sent = (
            f"one of shape {tuple(theirs)}"
            if value is None
            else f"a chunk of {theirs[0]} elements where this replica's chunk has {mine[0]}"
        )
        raise ValueError(
            f"wb.allreduce: replica {index} holds a value of shape "
            f"{tuple((like if value is None else value).shape)} but replica {sender} sent "
            f"{sent}. Every replica of a group must pass a value of the same shape and dtype "
            "(the same network's gradients); check that no cell sizes its network by the "
            "replica."
        )
    return beside(part, like)


def beside(part: Any, like: Any) -> Any:
    """``part`` on ``like``'s device (torch: ``.to``; CuPy: a copy on that GPU)."""
    if _is_cupy(like):
        import cupy

        if not _is_cupy(part) or part.device != like.device:
            with like.device:
                return cupy.asarray(part)
        return part
    device = getattr(like, "device", None)
    if device is not None and hasattr(part, "to") and getattr(part, "device", device) != device:
        return part.to(device)
    return part


# -- over torch.distributed ---------------------------------------------------------------
# The same mean, bit for bit, with a torch.distributed backend (gloo or NCCL) as transport
# instead of mailboxes. Not the library's own allreduce: its ring sums each chunk in an
# order that depends on the chunk's position, so the last bits would differ from the
# channels' sum in replica order, and switching the transport would change results
# (contract 1). Instead every element is summed in replica order here too: the value's
# bytes are all-gathered (small values: one collective), or cut into N equal chunks that an
# all-to-all sends to their owners, who sum and divide and all-gather the finished chunks
# (big values on 3+ replicas: 2·(N−1)/N·B bytes per replica, as the ring). Bytes go as
# uint8, so any dtype travels, and a header all-gathered first checks that every replica
# passes the same shape and dtype: gloo *aborts the process* when sizes disagree.

Wait = Callable[[Any], None]  # blocks until a torch.distributed Work is done (or raises)


def torch_allreduce(
    value: Any,
    index: int,
    count: int,
    backend: Any,
    wait: Wait,
    *,
    host_copy: bool = False,
    iteration: int | None = None,
    chunked_min_bytes: int = CHUNKED_MIN_BYTES,
    chunked_min_replicas: int = CHUNKED_MIN_REPLICAS,
) -> Any:
    """The mean of the torch tensor ``value`` over ``count`` replicas through ``backend``
    (a ``torch.distributed`` ``ProcessGroupGloo`` or ``ProcessGroupNCCL``; this replica is
    its rank ``index``), identical bit for bit to :func:`allreduce`'s. ``wait(work)``
    waits for each collective; ``host_copy`` reduces on the CPU (gloo given CUDA tensors)
    and puts the result back on ``value``'s device; ``iteration``, the caller's, must be
    every rank's (:func:`other_iteration`). The result has no autograd history.

    Example, two ranks of gloo in threads of one process:
        >>> import datetime, threading, torch, torch.distributed as dist
        >>> master = dist.TCPStore("127.0.0.1", 0, 2, True, wait_for_workers=False)
        >>> def rank(r, out):
        ...     store = master if r == 0 else dist.TCPStore("127.0.0.1", master.port, 2, False)
        ...     pg = dist.ProcessGroupGloo(store, r, 2, datetime.timedelta(seconds=30))
        ...     out[r] = torch_allreduce(torch.full((3,), float(r)), r, 2, pg, lambda w: w.wait())
        >>> out = {}
        >>> threads = [threading.Thread(target=rank, args=(r, out)) for r in range(2)]
        >>> for t in threads: t.start()
        >>> for t in threads: t.join()
        >>> out[0].tolist(), torch.equal(out[0], out[1])
        ([0.5, 0.5, 0.5], True)
    """
    import torch

    flat = value.detach().reshape(-1)
    if host_copy:
        flat = flat.cpu()
    flat = flat.contiguous()
    _agree_on_shape(value, flat, index, count, backend, wait, iteration)
    size = flat.numel()
    if size == 0:  # nothing to send (every replica agreed on the shape)
        result = flat / count
    elif size * flat.element_size() >= chunked_min_bytes and count >= chunked_min_replicas:
        result = _scattered_mean(flat, count, backend, wait)
    else:
        out = torch.empty(count * size, dtype=flat.dtype, device=flat.device)
        wait(backend._allgather_base(_as_bytes(out), _as_bytes(flat)))
        result = _mean_in_order(out.view(count, size))
    return result.reshape(value.shape).to(value.device)


def torch_payload_bytes(
    value: Any, count: int, chunked_min_bytes: int = CHUNKED_MIN_BYTES, chunked_min_replicas: int = CHUNKED_MIN_REPLICAS
) -> int:
    """The bytes one replica sends in :func:`torch_allreduce` of ``value`` (the header and
    the data; gloo's and NCCL's own framing not counted): what a run reports as sent.

    >>> import torch
    >>> torch_payload_bytes(torch.zeros(256), 2), torch_payload_bytes(torch.zeros(9155), 4)
    (1048, 55008)
    """
    if count == 1:
        return 0
    header = 3 * 8 * (count - 1)
    size, item = value.numel(), value.element_size()
    if size * item >= chunked_min_bytes and count >= chunked_min_replicas:
        chunk = -(-size // count)
        finished = item if value.is_floating_point() else 4  # integers average to float32
        return header + (count - 1) * chunk * (item + finished)
    return header + (count - 1) * size * item  # gloo's all-gather passes N−1 values on


def _scattered_mean(flat: Any, count: int, backend: Any, wait: Wait) -> Any:
    """Reduce-scatter by an all-to-all of N equal chunks (the last one padded), each
    owner's ordered sum, then an all-gather of the finished chunks."""
    import torch

    size = flat.numel()
    chunk = -(-size // count)
    padded = flat.new_zeros(count * chunk)
    padded[:size] = flat
    shares = torch.empty_like(padded)
    wait(backend.alltoall_base(_as_bytes(shares), _as_bytes(padded), [], []))
    mine = _mean_in_order(shares.view(count, chunk)).contiguous()
    out = torch.empty(count * chunk, dtype=mine.dtype, device=mine.device)
    wait(backend._allgather_base(_as_bytes(out), _as_bytes(mine)))
    return out[:size]


def _mean_in_order(rows: Any) -> Any:
    """Row 0 + row 1 + … in replica order, divided by N: the channels' arithmetic."""
    total = rows[0]
    for r in range(1, rows.shape[0]):
        total = total + rows[r]
    return total / rows.shape[0]


def _as_bytes(tensor: Any) -> Any:
    import torch

    return tensor.view(torch.uint8)


def _agree_on_shape(
    value: Any, flat: Any, index: int, count: int, backend: Any, wait: Wait, iteration: int | None = None
) -> None:
    """All-gather (iteration, elements, dtype, shape) from every replica and raise the
    channels' ``ValueError`` on every replica alike when one differs (so none goes on to a
    collective of another size)."""
    import zlib

    import torch

    mine = [
        -1 if iteration is None else iteration,
        flat.numel(),
        zlib.crc32(str(value.dtype).encode()),
        zlib.crc32(repr(tuple(value.shape)).encode()),
    ]
    out = torch.empty(4 * count, dtype=torch.int64, device=flat.device)
    wait(backend._allgather_base(out, torch.tensor(mine, dtype=torch.int64, device=flat.device)))
    headers = out.view(count, 4).tolist()
    late = next((r for r in range(count) if headers[r][0] != mine[0]), None)
    if late is not None:
        raise other_iteration(index, iteration, late, None if headers[late][0] == -1 else headers[late][0])
    headers = [h[1:] for h in headers]
    mine = mine[1:]
    other = next((r for r in range(count) if headers[r] != mine), None)
    if other is not None:
        raise ValueError(
            f"wb.allreduce: replica {index} holds a value of shape {tuple(value.shape)} and dtype "
            f"{value.dtype}, but replica {other} passed one of {headers[other][0]} elements"
            + (" of another dtype" if headers[other][1] != mine[1] else "")
            + ". Every replica of a group must pass a value of the same shape and dtype (the same "
            "network's gradients); check that no cell sizes its network by the replica."
        )
