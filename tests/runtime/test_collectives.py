"""The all-reduce behind ``wb.allreduce`` (:mod:`workbench.runtime.values.allreduce`).

Replicas are threads, each with its own mailbox, exchanging through a real postman: the
in-process ``LocalPostman`` for the arithmetic, and ``SocketPostman`` over localhost
sockets for the bytes each replica sends — the acceptance check of issue 15: in chunks,
the bytes per replica per reduction stay flat from 2 to 8 replicas.
"""

from __future__ import annotations

import secrets
import threading
import time

import numpy as np
import pytest
import torch

from workbench.runtime.values import allreduce as collectives
from workbench.runtime.transport.channels import LocalPostman, Mailbox, Peers, SocketServer, Stopped
from workbench.runtime.transport.socket_postman import SocketPostman

#: the quickstart PPO's flat gradient (actor and critic MLPs, 64 wide, CartPole): 9,155 floats
PPO_GRADIENT = 9155
TIMEOUT = 60.0


def _in_threads(count: int, work, failed: threading.Event | None = None) -> list:
    """``work(r)`` for r in 0..count-1, each in its own thread; their results in order.
    A thread's exception is raised here (one other than ``Stopped`` first) and sets
    ``failed``, which the others' waits may watch, as a run stops its replicas."""
    out: list = [None] * count
    errors: list = [None] * count

    def run(r: int) -> None:
        try:
            out[r] = work(r)
        except BaseException as exc:  # handed to the test's thread
            errors[r] = exc
            if failed is not None:
                failed.set()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a replica is still waiting: the reduction deadlocked"
    for exc in sorted((e for e in errors if e is not None), key=lambda e: isinstance(e, Stopped)):
        raise exc
    return out


def _reduce(
    values: list,
    algorithm: str = "scatter",
    reduction: int = 0,
    stopped=lambda: False,
    failed: threading.Event | None = None,
    **thresholds,
) -> list:
    """Reduce ``values`` (one per replica) with ``collectives.allreduce`` over mailboxes;
    by default every array goes in chunks by ``algorithm``, however small, on however few
    replicas."""
    count = len(values)
    boxes = {r: Mailbox() for r in range(count)}
    post = LocalPostman(boxes)
    thresholds = {"chunked_min_bytes": 0, "chunked_min_replicas": 2, "algorithm": algorithm, **thresholds}

    def work(r: int):
        def send(to, tag, v):
            post.send(to, "g", tag, r, v)

        def take(sender, tag):
            return boxes[r].take("g", tag, sender, stopped)

        return collectives.allreduce(values[r], r, count, reduction, send, take, **thresholds)

    return _in_threads(count, work, failed)


def _same_bits(a, b) -> bool:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000, 1001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_chunks_give_the_mean_with_the_same_bits_on_every_replica(count, size, dtype, kind, algorithm):
    rng = np.random.default_rng(count * 10_000 + size)
    arrays = [rng.standard_normal(size).astype(dtype) * 10 for _ in range(count)]
    values = arrays if kind == "numpy" else [torch.from_numpy(a.copy()) for a in arrays]
    out = _reduce(values, algorithm)
    expected = np.mean(np.stack(arrays).astype(np.float64), axis=0)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for result in out:
        assert type(result) is type(values[0])
        as_numpy = result.numpy() if kind == "torch" else result
        assert as_numpy.dtype == dtype and as_numpy.shape == (size,)
        np.testing.assert_allclose(as_numpy, expected, rtol=tolerance, atol=tolerance)
        assert _same_bits(result, out[0])  # one chunk sum, copied: every replica agrees
    again = _reduce(values, algorithm)
    assert all(_same_bits(a, b) for a, b in zip(out, again))  # run to run too
    if algorithm == "scatter":  # each element summed in replica order, as the direct exchange does
        direct = _reduce(values, chunked_min_bytes=1 << 40)
        assert all(_same_bits(a, b) for a, b in zip(out, direct))


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_chunks_keep_shape_dtype_and_drop_autograd_history(algorithm):
    count = 3
    grads = [
        torch.arange(2 * 3 * 5, dtype=torch.float32).reshape(2, 3, 5).transpose(0, 2) * (r + 1) for r in range(count)
    ]  # non-contiguous, as a transposed view is
    values = [g.clone().requires_grad_() for g in grads]
    out = _reduce(values, algorithm)
    expected = sum(grads) / count
    for result in out:
        assert result.shape == (5, 3, 2) and result.dtype == torch.float32
        assert result.device == values[0].device and not result.requires_grad
        assert torch.equal(result, expected)  # small integers: exact whatever the order


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_the_mean_of_integers_is_a_true_division_as_the_direct_one(algorithm):
    values = [np.array([1, 2, 4, 7, 9], dtype=np.int64) * (r + 1) for r in range(4)]
    chunked, direct = _reduce(values, algorithm), _reduce(values, chunked_min_bytes=1 << 40)
    for a, b in zip(chunked, direct):
        np.testing.assert_allclose(a, b)
        assert a.dtype == b.dtype == np.float64


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_chunks_handle_a_0d_array(algorithm):
    out = _reduce([np.array(float(r)) for r in range(3)], algorithm)
    assert all(r.shape == () and float(r) == 1.0 for r in out)


@pytest.mark.parametrize("algorithm", ["direct", *collectives.ALGORITHMS])
def test_mismatched_shapes_say_which_replica_and_what_to_do(algorithm):
    values = [np.zeros(12), np.zeros(12), np.zeros(15)]
    options = {"chunked_min_bytes": 1 << 40} if algorithm == "direct" else {"algorithm": algorithm}
    failed = threading.Event()  # as in a run: one replica's error stops the others' waits
    sent = (
        r"one of shape \(\d+,\)"
        if algorithm == "direct"
        else r"a chunk of \d elements where this replica's chunk has \d"
    )
    with pytest.raises(
        ValueError,
        match=rf"replica \d holds a value of shape \(1[25],\) but replica \d sent "
        rf"{sent}\. Every replica .* same shape and dtype",
    ):
        _reduce(values, stopped=failed.is_set, failed=failed, **options)


def test_an_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="algorithm must be one of"):
        collectives.allreduce(1.0, 0, 2, 0, None, None, algorithm="tree")


# ------------------------------------------------------------------ through Peers (wb.allreduce)
def _peers(count: int, postman_for, stopped=lambda: False) -> list[Peers]:
    boxes = [Mailbox() for _ in range(count)]
    return [Peers("learner", r, boxes[r], postman_for(r, boxes), {"learner": count}, stopped) for r in range(count)]


def _local_peers(count: int, stopped=lambda: False) -> list[Peers]:
    return _peers(count, lambda r, boxes: LocalPostman({("learner", i): b for i, b in enumerate(boxes)}), stopped)


def test_consecutive_reductions_of_both_kinds_do_not_mix_their_messages():
    """Floats and small arrays take the direct path, big arrays go in chunks: their tags
    must not collide across reductions, nor the two phases within one."""
    count = 4
    peers = _local_peers(count)
    big = collectives.CHUNKED_MIN_BYTES // 4 + 3  # float32 elements: just over the threshold

    def work(r: int):
        out = []
        for i in range(6):
            out.append(peers[r].allreduce(float(r + i)))
            out.append(peers[r].allreduce(np.full(big, r + i, dtype=np.float32)))
            out.append(peers[r].allreduce(torch.full((3,), float(r * i))))
        return out

    results = _in_threads(count, work)
    mean_r = (count - 1) / 2
    for out in results:
        for i in range(6):
            scalar, chunked, small = out[3 * i : 3 * i + 3]
            assert scalar == mean_r + i
            assert chunked.shape == (big,) and np.all(chunked == mean_r + i)
            assert torch.equal(small, torch.full((3,), mean_r * i))


def test_a_stop_while_waiting_for_chunks_raises_stopped():
    count = 3
    stop = threading.Event()
    peers = _local_peers(count, stopped=stop.is_set)
    value = np.ones(collectives.CHUNKED_MIN_BYTES // 8 * 2)

    def work(r: int):
        if r == 2:  # replica 2 never reaches the sync point; the run is stopped instead,
            time.sleep(0.3)  # while the others wait for its chunks
            stop.set()
            return "absent"
        try:
            peers[r].allreduce(value)
        except Stopped:
            return "stopped"
        return "returned"

    assert _in_threads(count, work) == ["stopped", "stopped", "absent"]


def _bytes_per_reduction(count: int, size: int, chunked_min_bytes: int, reductions: int = 3) -> list[float]:
    """Bytes each replica sent per reduction of a float32 gradient of ``size`` elements,
    replicas in threads exchanging over real localhost sockets (``SocketPostman``)."""
    key = secrets.token_bytes(32)
    boxes = [Mailbox() for _ in range(count)]
    servers = [SocketServer(box, "127.0.0.1", key) for box in boxes]
    addresses = {("learner", r): s.address for r, s in enumerate(servers)}
    postmen = [SocketPostman(addresses, key) for _ in range(count)]
    peers = [Peers("learner", r, boxes[r], postmen[r], {"learner": count}, lambda: False) for r in range(count)]
    for p in peers:
        p.chunked_min_bytes = chunked_min_bytes
    gradients = [np.random.default_rng(r).standard_normal(size).astype(np.float32) for r in range(count)]
    try:

        def work(r: int):
            return [peers[r].allreduce(torch.from_numpy(gradients[r])) for _ in range(reductions)]

        out = _in_threads(count, work)
        expected = np.mean(np.stack(gradients), axis=0)
        for results in out:
            for result in results:
                np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)
                assert _same_bits(result, out[0][0])
        return [p.bytes_sent / reductions for p in postmen]
    finally:
        for p in postmen:
            p.close()
        for s in servers:
            s.close()


def test_bytes_per_replica_per_reduction_stay_flat_from_2_to_8_replicas():
    """Issue 15's acceptance: the quickstart gradient, averaged over 2, 4 and 8 replicas
    by ``Peers.allreduce`` with its default choice, costs each replica under 2× the
    gradient's bytes, whatever the count — where all-to-all costs (N−1)×."""
    payload = PPO_GRADIENT * 4
    assert payload >= collectives.CHUNKED_MIN_BYTES  # the quickstart's gradient goes in chunks
    chunked = {n: _bytes_per_reduction(n, PPO_GRADIENT, Peers.chunked_min_bytes) for n in (2, 4, 8)}
    for n, per_replica in chunked.items():
        # 2(N−1)/N of the payload, plus a header per message (key, tag, dtype: ~200 B)
        bound = 2 * (n - 1) / n * payload + 2 * (n - 1) * 400
        assert all(b <= bound for b in per_replica), (n, per_replica, bound)
        assert max(per_replica) - min(per_replica) < 0.05 * payload  # every replica alike
    assert max(chunked[8]) < 2 * payload
    assert max(chunked[8]) / min(chunked[2]) < 2.0
    # the same counter on the all-to-all exchange: N−1 whole gradients each, so the ring is why
    direct = _bytes_per_reduction(8, PPO_GRADIENT, chunked_min_bytes=1 << 40)
    assert min(direct) >= 7 * payload
