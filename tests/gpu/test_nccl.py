"""NCCL all-reduce of CUDA gradients through workbench's torch.distributed path
(``workbench.runtime.transport.process_group``, ``collectives.torch_allreduce``).

NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and a GPU host may have only
one. So what runs everywhere with CUDA is world size 1 through the real NCCL path: a real
``TCPStore`` hosted as replica 0 hosts it, a real ``ProcessGroupNCCL`` with its
communicator made eagerly, the shape header and the data collectives (all-gather, and the
all-to-all + all-gather of chunked values), a real backward pass's gradients, and the
reducer a replica's loop installs choosing NCCL by itself. Two ranks (threads of this
process, one GPU each) run only where ``torch.cuda.device_count() >= 2``; a MultiLearner
PPO over NCCL between worker processes is in tests/gpu/test_dask_cuda.py, on as many GPUs
as the host has. Skipped without CUDA or NCCL; the CPU twins (gloo, same code) are
tests/runtime/test_collectives_torch.py and tests/runtime/test_collectives_cluster.py.

Self-contained: ``pytest -m gpu tests/gpu/test_nccl.py -rs`` on a host with CUDA.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest


def _nccl() -> bool:
    try:
        import torch
        import torch.distributed as dist

        return torch.cuda.is_available() and dist.is_available() and dist.is_nccl_available()
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _nccl(), reason="needs CUDA and torch with NCCL")]

#: the quickstart PPO's flat gradient: 9,155 float32, chunked on 3+ replicas
PPO_GRADIENT = 9155


def _nccl_groups(count: int):
    """``count`` NCCL ranks, rank r on ``cuda:r``, formed in threads of this process."""
    import torch

    from workbench.runtime.transport.process_group import TorchGroup, host_store

    store, port = host_store("127.0.0.1", count)
    groups: list = [None] * count
    errors: list = []

    def form(r: int) -> None:
        try:
            groups[r] = TorchGroup.form(
                "nccl",
                r,
                count,
                "127.0.0.1",
                "127.0.0.1",
                port,
                "gpu-test",
                device=torch.device("cuda", r),
                store=store if r == 0 else None,
            )
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=form, args=(r,)) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return groups


def _channels_mean(values):
    """The channels' mean of CPU copies of ``values`` (the reference bits)."""
    from workbench.runtime.values import allreduce as collectives
    from workbench.runtime.transport.channels import LocalPostman, Mailbox

    count = len(values)
    boxes = {r: Mailbox() for r in range(count)}
    post = LocalPostman(boxes)
    out: list = [None] * count

    def work(r: int) -> None:
        out[r] = collectives.allreduce(
            values[r].cpu(),
            r,
            count,
            0,
            lambda to, tag, v: post.send(to, "g", tag, r, v),
            lambda sender, tag: boxes[r].take("g", tag, sender, lambda: False),
        )

    threads = [threading.Thread(target=work, args=(r,)) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out[0]


def test_world_size_1_runs_the_real_nccl_path_and_returns_the_value_bit_for_bit():
    import torch

    from workbench.runtime.values import allreduce as collectives
    from workbench.runtime.transport import process_group

    (group,) = _nccl_groups(1)
    try:
        assert group.kind == "nccl" and process_group.open_groups("nccl") == 1
        for shape, dtype in [
            ((), torch.float32),
            ((3,), torch.float32),
            ((PPO_GRADIENT,), torch.float32),
            ((2, 5), torch.float64),
            ((7,), torch.int64),
            ((301, 17), torch.float16),
        ]:
            value = (torch.randn(shape, device="cuda:0") * 100).to(dtype)
            result = group.allreduce(value, stopped=lambda: False)
            assert result.device == value.device and result.shape == value.shape
            assert torch.equal(result.cpu(), _channels_mean([value]))
            # the chunked shape of the algorithm too (an all-to-all, then an all-gather)
            chunked = collectives.torch_allreduce(
                value, 0, 1, group.backend, lambda w: w.wait(), chunked_min_bytes=0, chunked_min_replicas=1
            )
            assert torch.equal(chunked, result)
    finally:
        group.close()
    assert process_group.open_groups() == 0


def test_a_backward_pass_gradient_goes_through_nccl_unchanged():
    import torch

    (group,) = _nccl_groups(1)
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)).cuda()
        net(torch.randn(32, 4, device="cuda")).square().mean().backward()
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        synced = group.allreduce(flat, stopped=lambda: False)
        assert synced.is_cuda and torch.equal(synced, flat) and not synced.requires_grad
    finally:
        group.close()


def test_the_replicas_reducer_chooses_nccl_for_cuda_tensors_by_itself():
    """What a replica's loop installs (``allreduce_for``), at world size 1: auto and torch
    both pick NCCL for a CUDA tensor on a GPU placement; the group closes with its loop."""
    import time

    import torch

    from workbench.runtime.transport import process_group
    from workbench.runtime.transport.channels import LocalPostman, Mailbox, Peers

    for mode in ("auto", "torch"):
        box = Mailbox()
        peers = Peers("learner", 0, box, LocalPostman({("learner", 0): box}), {"learner": 1}, lambda: False)
        reducer = process_group.Reducer(peers, mode, "w0", "cuda:0")
        out: list = []
        loop = threading.Thread(target=lambda: out.append(reducer(torch.arange(5.0, device="cuda:0"))))
        loop.start()
        loop.join(120)
        assert reducer.path == "nccl" and torch.equal(out[0], torch.arange(5.0, device="cuda:0"))
        deadline = time.monotonic() + 10  # the loop thread ended: its watcher closes the group
        while process_group.open_groups() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_group.open_groups() == 0
        del peers


@pytest.mark.skipif(
    not _nccl() or __import__("torch").cuda.device_count() < 2,
    reason="two NCCL ranks need two GPUs (NCCL refuses two ranks on one GPU)",
)
def test_two_gpus_give_the_channels_bits():
    import torch

    count = min(3, torch.cuda.device_count())
    groups = _nccl_groups(count)
    try:
        for size in (5, PPO_GRADIENT, 262144):
            values = [
                torch.from_numpy(np.random.default_rng(r).standard_normal(size).astype(np.float32)).to(f"cuda:{r}")
                for r in range(count)
            ]
            out: list = [None] * count

            def work(r: int) -> None:
                with torch.cuda.device(r):
                    out[r] = groups[r].allreduce(values[r], stopped=lambda: False)

            threads = [threading.Thread(target=work, args=(r,)) for r in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            expected = _channels_mean(values)
            for r in range(count):
                assert out[r].device == torch.device("cuda", r) and torch.equal(out[r].cpu(), expected)
    finally:
        for g in groups:
            g.close()
