"""The capture that every algorithm's CUDA graphs go through (``workbench.kernels.cuda_graphs``),
on a real GPU (skipped without CUDA): a function that cannot be captured falls back to its
eager call with one warning and leaves the thread's stream as it was."""

from __future__ import annotations

import pytest

from tests.gpu import ON_TORCH_GPU

pytestmark = ON_TORCH_GPU


def test_a_capture_that_fails_runs_eagerly_and_leaves_the_stream_as_it_was():
    import torch

    from workbench.kernels.cuda_graphs import graphed_call

    owner = torch.nn.Linear(4, 4).cuda()
    x = torch.ones(3, 4, device="cuda")
    before = torch.cuda.current_stream()

    def syncs(x):  # reads a value on the host: no graph can hold that
        return (x * float(x.sum().item()),)

    results = []
    with pytest.warns(RuntimeWarning, match="capturing it failed"):
        for _ in range(4):  # two eager warm-ups, the failed capture, then eager for good
            results.append(graphed_call(owner, "syncs", syncs, (x,)))
    assert results == [None] * 4
    assert torch.cuda.current_stream() == before
    # the failure was that function's alone: another one of the same owner captures and replays
    doubled = [graphed_call(owner, "doubles", lambda x: (x * 2,), (x + i,)) for i in range(4)]
    assert doubled[:2] == [None, None]
    assert all(torch.equal(out[0], (x + i) * 2) for i, out in enumerate(doubled) if out is not None)
    assert doubled[2] is not None and doubled[3] is not None
