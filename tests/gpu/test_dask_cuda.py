"""dask-cuda's ``LocalCUDACluster`` as a run's cluster: one worker per GPU, each detected
as a GPU worker with one GPU (``workbench.cluster.gpus``, rule 3), passed as the cluster
object itself or as a Client of it; a short GPUOnly PPO trains on it, and with two GPUs or
more a MultiLearner PPO averages its gradients over NCCL by default.

The gpu tests need CUDA, CuPy and ``dask_cuda`` (``pip install dask-cuda``; it imports
without a GPU, but ``LocalCUDACluster`` asks NVML for the GPUs and fails without one), and
are skipped otherwise. Their CPU twin here: any Dask cluster object (``LocalCluster``, the
class ``LocalCUDACluster`` derives from) is accepted as ``cluster=``, the cluster stays
the user's, and runs one after another reuse it.

Self-contained: ``pytest -m gpu tests/gpu/test_dask_cuda.py -rs`` on a host with CUDA.
"""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest

import workbench as wb


def _cuda_with_cupy() -> bool:
    try:
        import torch

        from workbench.kernels import gpu_available

        return gpu_available() and torch.cuda.is_available()
    except Exception:
        return False


def needs_dask_cuda(test):
    """gpu-marked; skipped without dask-cuda, CUDA, CuPy or torch."""
    test = pytest.mark.skipif(not _cuda_with_cupy(), reason="needs CUDA with CuPy and torch")(test)
    test = pytest.mark.skipif(
        importlib.util.find_spec("dask_cuda") is None, reason="needs dask-cuda (pip install dask-cuda)"
    )(test)
    return pytest.mark.gpu(test)


def _ppo_logging_where_it_learns():
    """The PPO FDG, its update logging whether the learner is on CUDA and how many NCCL
    groups its process holds (the cells are PPO's, unchanged)."""
    from workbench.algorithms import ppo
    from workbench.runtime.transport.process_group import open_groups

    def ppo_update_on(agent, *args, **kwargs):
        wb.log("test/learner_on_cuda", float(ppo.device_of(agent).type == "cuda"))
        losses = ppo.ppo_update(agent, *args, **kwargs)
        wb.log("test/nccl_groups", float(open_groups("nccl")))
        return losses

    return ppo.build_fdg(dict(vars(ppo), ppo_update=ppo_update_on))


@pytest.fixture(scope="module")
def cuda_cluster():
    from dask_cuda import LocalCUDACluster

    with LocalCUDACluster(
        host="127.0.0.1", dashboard_address="127.0.0.1:0", threads_per_worker=2, silence_logs=logging.ERROR
    ) as cluster:
        yield cluster


@needs_dask_cuda
@pytest.mark.parametrize("as_client", [False, True], ids=["the cluster object", "a Client of it"])
def test_gpuonly_ppo_trains_on_a_local_cuda_cluster(as_client, cuda_cluster):
    import torch
    from distributed import Client

    from workbench.cluster.connect import inventory_of

    with Client(cuda_cluster, set_as_default=False) as client:
        workers = inventory_of(client).workers
        # one worker per GPU, each a GPU worker with one GPU (its own, device 0 in its process)
        assert len(workers) == torch.cuda.device_count()
        assert [w.gpus for w in workers] == [1] * len(workers)
        run = _ppo_logging_where_it_learns().run(
            iterations=3, steps=16, policy="gpuonly", cluster=client if as_client else cuda_cluster, progress=False
        )
    assert run.status == "finished", run.error
    assert run.policy.groups[0].device == "gpu"
    assert run.metrics["test/learner_on_cuda"].tolist() == [1.0] * 3
    assert np.isfinite(run.metrics["losses/value_loss"]).all()


@needs_dask_cuda
def test_multilearner_averages_over_nccl_by_default_on_two_gpus_or_more(cuda_cluster):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL between learners needs a GPU each (NCCL refuses two ranks on one GPU): this host has one")
    run = _ppo_logging_where_it_learns().run(
        iterations=3, steps=16, policy=wb.MultiLearner(learners=2), cluster=cuda_cluster, progress=False
    )  # allreduce="auto"
    assert run.status == "finished", run.error
    assert (run.metrics["test/nccl_groups"] == 1.0).all(), "the learners did not average over NCCL"
    first, second = (r["agent"].state_dict() for r in run.state.fragments["learner"])
    assert all(torch.equal(first[k], second[k]) for k in first)


# -- the CPU twin ---------------------------------------------------------------------------
def test_a_dask_cluster_object_is_accepted_as_the_cluster_and_stays_the_users():
    from distributed import LocalCluster

    from workbench.algorithms import ppo

    with LocalCluster(
        n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR
    ) as cluster:
        for _ in range(2):  # the first run's client closes; the cluster stays up for the next
            cfg = ppo.PPOConfig()
            run = ppo.build_fdg({**vars(ppo), "cfg": cfg}).run(
                iterations=2, steps=16, policy="multilearner", cluster=cluster, progress=False
            )
            assert run.status == "finished", run.error
            assert len(run.state.fragments["learner"]) == 2
        assert cluster.status.name == "running"
