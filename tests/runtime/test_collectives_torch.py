"""``wb.allreduce`` over torch.distributed, replicas as threads of this process with real
gloo process groups and real ``TCPStore``s (the way the inline backend runs replicas, and
what two learner replicas sharing a worker do): the same bits as the channels, the same
errors, a stop that interrupts a wait, groups closed when their loop ends. On a real
cluster: tests/runtime/test_collectives_cluster.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from workbench.config import RunConfig, parse_run_line
from workbench.errors import ProcessGroupError, RunConfigError
from workbench.runtime.values import allreduce as collectives
from workbench.runtime.transport import process_group
from workbench.runtime.transport.channels import LocalPostman, Mailbox, Peers, Stopped
from workbench.runtime.transport.process_group import Hello, Reducer, TorchGroup, choose, host_store

from tests.runtime.test_collectives import PPO_GRADIENT, _in_threads, _reduce


def _groups(count: int) -> list[TorchGroup]:
    """``count`` gloo ranks of one group, formed in threads."""
    store, port = host_store("127.0.0.1", count)
    return _in_threads(
        count,
        lambda r: TorchGroup.form(
            "gloo", r, count, "127.0.0.1", "127.0.0.1", port, "test", store=store if r == 0 else None
        ),
    )


def _close(groups) -> None:
    for g in groups:
        g.close()


def _values(count: int, size, dtype=torch.float32) -> list[torch.Tensor]:
    return [
        torch.from_numpy(np.asarray(np.random.default_rng(r).standard_normal(size) * 100)).to(dtype)
        for r in range(count)
    ]


@pytest.mark.parametrize("count", [2, 3, 4])
def test_gloo_gives_the_channels_bits_for_every_size_and_dtype(count):
    """Small values (one all-gather) and chunked ones (all-to-all + all-gather, sizes that
    do not divide by N, fewer elements than replicas), floats and integers: the mean of
    every replica is the channels' (direct and scatter) to the bit, and alike everywhere."""
    groups = _groups(count)
    try:
        cases = [
            ((), torch.float32),
            ((3,), torch.float32),
            ((2, 5), torch.float64),
            ((7,), torch.int64),
            ((PPO_GRADIENT,), torch.float32),
            ((count - 1,), torch.float32),
            ((301, 17), torch.float32),
        ]
        for shape, dtype in cases:
            values = _values(count, shape, dtype)
            for small in (collectives.CHUNKED_MIN_BYTES, 0):  # the default split, and all chunked
                got = _in_threads(count, lambda r: _torch_mean(groups[r], values[r], small))
                expected = _reduce(values, chunked_min_bytes=small, chunked_min_replicas=3)
                for r in range(count):
                    assert got[r].dtype == expected[r].dtype and got[r].shape == values[r].shape
                    assert torch.equal(got[r], expected[0]), (shape, dtype, small, r)
    finally:
        _close(groups)


def _torch_mean(group: TorchGroup, value, chunked_min_bytes: int):
    return collectives.torch_allreduce(
        value, group.index, group.count, group.backend, lambda w: w.wait(), chunked_min_bytes=chunked_min_bytes
    )


def test_a_value_of_another_shape_is_the_channels_error_on_every_replica_not_a_crash():
    """gloo aborts the whole process when sizes disagree: the header all-gathered first
    turns that into the channels' ValueError, raised by every replica alike."""
    groups = _groups(3)
    try:

        def work(r):
            value = torch.ones(4 if r == 1 else 5)
            with pytest.raises(ValueError, match="same shape and dtype") as caught:
                groups[r].allreduce(value, lambda: False)
            return str(caught.value)

        said = _in_threads(3, work)
        assert "replica 1 passed one of 4 elements" in said[0] and "replica 0 passed one of 5" in said[1]
        # and the group goes on: nobody started a collective of the wrong size
        out = _in_threads(3, lambda r: groups[r].allreduce(torch.full((5,), float(r)), lambda: False))
        assert all(torch.equal(o, torch.ones(5)) for o in out)
    finally:
        _close(groups)


def test_a_stop_while_a_replica_waits_for_an_absent_one_raises_stopped():
    groups = _groups(3)
    stop = threading.Event()
    try:

        def work(r):
            if r == 2:  # never reaches the sync point; the run is stopped instead
                time.sleep(0.3)
                stop.set()
                return "absent"
            try:
                groups[r].allreduce(torch.ones(collectives.CHUNKED_MIN_BYTES), stop.is_set)
            except Stopped:
                return "stopped"
            return "returned"

        assert _in_threads(3, work) == ["stopped", "stopped", "absent"]
        assert groups[0].broken and groups[1].broken
    finally:
        closing = [threading.Thread(target=g.close, daemon=True) for g in groups]
        for t in closing:
            t.start()
        for t in closing:  # rank 2's close ends the others' abandoned collective
            t.join(30)
        assert not any(t.is_alive() for t in closing)
    assert process_group.open_groups() == 0


def test_joining_a_store_where_nothing_listens_fails_within_the_timeout(monkeypatch):
    monkeypatch.setattr(process_group, "RENDEZVOUS_TIMEOUT_S", 1.0)
    store, port = host_store("127.0.0.1", 2)
    del store  # its server is gone: the port is closed
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed out|refused|connect"):
        TorchGroup.form("gloo", 1, 2, "127.0.0.1", "127.0.0.1", port, "t")
    assert time.monotonic() - started < 30


# -- the reducer a replica's loop installs: hellos, choice, rendezvous, watcher ------------
def _reducers(count: int, mode: str, stopped=lambda: False) -> tuple[list[Reducer], list[Peers]]:
    """Each replica's reducer, and the Peers its loop would own (a reducer holds them
    weakly: they must outlive it)."""
    boxes = [Mailbox() for _ in range(count)]
    post = LocalPostman({("learner", i): b for i, b in enumerate(boxes)})
    peers = [Peers("learner", r, boxes[r], post, {"learner": count}, stopped) for r in range(count)]
    return [Reducer(p, mode, f"w{p.index}", "cpu") for p in peers], peers


def test_the_reducer_forms_a_gloo_group_at_the_first_tensor_and_closes_it_when_its_loop_ends():
    count = 3
    reducers, peers = _reducers(count, "torch")
    values = _values(count, PPO_GRADIENT)

    def loop(r):
        out = [reducers[r](2.0 * r), reducers[r](values[r]), reducers[r](np.full(3, float(r)))]
        return out + [reducers[r](values[r] * 2)]

    out = _in_threads(count, loop)
    assert [r.path for r in reducers] == ["gloo"] * count
    expected = _reduce(values, chunked_min_bytes=collectives.CHUNKED_MIN_BYTES, chunked_min_replicas=3)[0]
    for o in out:
        assert o[0] == 2.0 and o[2].tolist() == [1.0] * 3  # floats and NumPy: the channels
        assert torch.equal(o[1], expected) and torch.equal(o[3], out[0][3])
    assert [h.worker for h in reducers[0].hellos] == ["w0", "w1", "w2"]
    deadline = time.monotonic() + 10  # each loop thread ended: its watcher closes its group
    while process_group.open_groups() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_group.open_groups() == 0 and all(r.torch_group is None for r in reducers)
    del peers


def test_channels_and_auto_on_a_cpu_group_never_form_one():
    for mode in ("channels", "auto"):
        reducers, peers = _reducers(2, mode)
        out = _in_threads(2, lambda r: reducers[r](torch.full((4,), float(r))))
        assert all(torch.equal(o, torch.full((4,), 0.5)) for o in out)
        assert [r.path for r in reducers] == [None, None] and not reducers[0].hellos


def test_the_choice_needs_every_replica_on_a_gpu_of_its_own():
    a = Hello(0, "w0", "h0", cuda=True, gpu="GPU-a", nccl=True)
    b = Hello(1, "w1", "h1", cuda=True, gpu="GPU-b", nccl=True)
    cpu = Hello(1, "w1", "h1")
    assert choose("auto", [a, b]) == "nccl" and choose("auto", [a, cpu]) == "channels"
    assert choose("torch", [a, cpu]) == "gloo"  # mixed: gloo, the CUDA tensor through the host
    tls = Hello(1, "w1", "h1", cuda=True, gpu="GPU-b", nccl=True, tls=True)
    assert choose("auto", [a, tls]) == "channels"  # NCCL does not encrypt: a TLS run keeps TLS
    assert choose("torch", [a, tls]) == "nccl"  # unless asked for by name


def test_a_replica_that_cannot_host_the_store_fails_every_replica_with_names_and_the_fix():
    """Replica 0 cannot listen on the address it would host the store on: it tells the
    others over the channels, and every replica raises the same ProcessGroupError."""
    count = 2
    reducers, peers = _reducers(count, "torch")
    for r in reducers:  # an address of no interface here (TEST-NET-1): bind fails
        r._host = lambda index: "192.0.2.1"

    def work(r):
        with pytest.raises(ProcessGroupError) as caught:
            reducers[r](torch.ones(3))
        return str(caught.value)

    for text in _in_threads(count, work):
        assert "could not form the process group of the 2 replicas of 'learner'" in text
        assert "replica 0 on worker w0 (192.0.2.1), replica 1 on worker w1 (192.0.2.1)" in text
        assert "replica 0 on worker w0 could not host the rendezvous store on 192.0.2.1" in text
        assert "allreduce='channels'" in text


# -- the option -------------------------------------------------------------------------
def test_the_option_is_checked_by_name_with_its_choices():
    assert RunConfig().allreduce == "auto" and RunConfig(allreduce="torch").allreduce == "torch"
    assert parse_run_line("run --allreduce channels") == {"allreduce": "channels"}
    with pytest.raises(RunConfigError, match=r"--allreduce must be one of auto, channels, torch, got 'nccl'"):
        RunConfig(allreduce="nccl")
    with pytest.raises(RunConfigError, match="--allreduce must be one of"):
        parse_run_line("run --allreduce gloo")
