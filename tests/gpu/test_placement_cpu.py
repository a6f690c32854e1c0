"""GPU detection and placement, pinned on the CPU: a worker plugin reports GPUs (pretend
ones here), the inventory counts them without ``--resources GPU=N``, and presets put the
learner / the GPUOnly loop there."""

from __future__ import annotations

import logging

import pytest

from workbench.algorithms import ppo
from workbench.cluster.gpus import GPUDetection, detect_worker_gpus, register_gpu_detection
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.policy import GPUOnly, MultiLearner, SingleLearnerCoarse, SingleLearnerFine


def inventory(*gpus: int) -> Inventory:
    return Inventory(tuple(WorkerInfo(f"tcp://10.0.0.{i}:1", f"w{i}", 2, n) for i, n in enumerate(gpus)))


@pytest.fixture(scope="module")
def fdg():
    return ppo.build_fdg()


def test_gpuonly_and_the_single_learner_go_to_the_gpu_worker(fdg):
    inv = inventory(0, 2, 0)
    gpu_only = GPUOnly().place(fdg, inv)
    assert [(g.workers, g.device) for g in gpu_only.groups] == [(("w1",), "gpu")]
    coarse = SingleLearnerCoarse().place(fdg, inv)
    assert coarse.group_of("learner").workers == ("w1",) and coarse.group_of("learner").device == "gpu"
    assert coarse.group_of("env").device == "cpu"
    fine = SingleLearnerFine().place(fdg, inv)
    assert fine.group_of("learner").device == "gpu" and fine.group_of("env").device == "cpu"
    for policy in (gpu_only, coarse, fine):
        policy.check(fdg, inv)


def test_without_gpus_every_preset_stays_on_the_cpu(fdg):
    inv = inventory(0, 0)
    for preset in (GPUOnly(), SingleLearnerCoarse(), SingleLearnerFine(), MultiLearner()):
        assert {g.device for g in preset.place(fdg, inv).groups} == {"cpu"}


def test_multilearner_learns_on_gpus_when_every_worker_has_one(fdg):
    assert MultiLearner().place(fdg, inventory(1, 1)).groups[0].device == "gpu"
    assert MultiLearner().place(fdg, inventory(1, 0)).groups[0].device == "cpu"


def test_a_fragment_asking_for_a_gpu_gets_one_where_its_workers_have_one():
    from workbench.fdg.graph import Graph

    fdg = Graph()
    fdg.add_fragment("env", "obs = make()", rate="init", device="gpu")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = advance(action)", rate="step")
    fdg.add_fragment("learner", "w = learn(obs, action)", rate="iteration")
    assert SingleLearnerCoarse().place(fdg, inventory(1, 1)).group_of("env").device == "gpu"
    # a wish, as on the board: a worker without a GPU still runs it, on its CPU
    assert SingleLearnerCoarse().place(fdg, inventory(1, 0)).group_of("env").device == "cpu"


def test_detection_rules():
    assert detect_worker_gpus({}, {}, probe=lambda: 4) == 4
    assert detect_worker_gpus({}, {"dask_cuda": 1}, probe=lambda: 4) == 1
    assert detect_worker_gpus({"WORKBENCH_WORKER_GPUS": "0"}, {}, probe=lambda: 4) == 0
    assert detect_worker_gpus({}, {"dask_cuda": 1}, probe=lambda: 0) == 0
    with pytest.raises(ValueError, match="whole number"):
        detect_worker_gpus({"WORKBENCH_WORKER_GPUS": "two"}, {}, probe=lambda: 4)


def host_gpus() -> int:
    """The GPUs this host has, asked of torch rather than of the code under test."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# These two check real detection where the answer is "none"; on a GPU host that answer is
# wrong by design, and tests/gpu/test_on_gpu.py checks that detection finds the GPUs there.
cpu_host_only = pytest.mark.skipif(
    host_gpus() > 0,
    reason="this host has a GPU: "
    "test_on_gpu.py::test_detection_and_the_inventory_find_this_hosts_gpus "
    "checks real detection here",
)


@cpu_host_only
def test_detection_on_this_cpu_host_finds_none():
    assert detect_worker_gpus({}, {}) == 0


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as c:
        yield c


@cpu_host_only
def test_workers_report_their_gpus_to_the_inventory(cluster, fdg):
    from distributed import Client

    from workbench.cluster.connect import inventory_of

    with Client(cluster, set_as_default=False) as client:
        assert inventory_of(client).gpu_workers() == ()  # real detection: this host has none
        register_gpu_detection(client, count=2, force=True)  # pretend: a 2-GPU worker
        inv = inventory_of(client)
        assert [w.gpus for w in inv.workers] == [2]
        # the worker process now gives a replica placed on "gpu" a concrete cuda:K
        from workbench.devices import gpus_here

        assert client.run(gpus_here) == {inv.workers[0].address: 2}
        assert GPUOnly().place(fdg, inv).groups[0].device == "gpu"
        register_gpu_detection(client, count=0, force=True)
        assert inventory_of(client).gpu_workers() == ()


def test_a_declared_gpu_resource_wins():
    from distributed import Client, LocalCluster

    from workbench.cluster.connect import inventory_of

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
            resources={"GPU": 1},
        ) as c,
        Client(c, set_as_default=False) as client,
    ):
        register_gpu_detection(client, count=3, force=True)
        assert [w.gpus for w in inventory_of(client).workers] == [1]


def test_the_plugin_pickles_for_the_workers():
    import cloudpickle

    assert cloudpickle.loads(cloudpickle.dumps(GPUDetection(2))).count == 2


def test_inline_on_the_gpu_places_every_fragment_in_this_process_there(fdg):
    from workbench.fdg.errors import PlacementError
    from workbench.fdg.policy import Inline, needs_cluster

    policy = Inline(device="gpu").place(fdg)
    assert [(g.workers, g.device, g.replicas) for g in policy.groups] == [(("local",), "gpu", 1)]
    assert policy.in_process and not needs_cluster(Inline(device="gpu"))
    assert Inline().place(fdg).groups[0].device == "cpu"  # the default stays the CPU
    with pytest.raises(PlacementError, match=r"Inline: device must be 'cpu' or 'gpu', not 'cuda'"):
        Inline(device="cuda")


@cpu_host_only
def test_inline_on_the_gpu_of_a_host_without_one_says_so_and_loses_nothing(fdg):
    from workbench.fdg.errors import PlacementError
    from workbench.fdg.policy import Inline

    before = {name: list(frag.cells) for name, frag in fdg.fragments.items()}
    # refused before anything starts (tests/test_gpu_placement_refused.py has the whole message)
    with pytest.raises(PlacementError, match=r"on the GPU of this process .*, which has no GPU"):
        fdg.run(iterations=1, policy=Inline(device="gpu"), progress=False)
    assert {name: list(frag.cells) for name, frag in fdg.fragments.items()} == before
    assert fdg.run(iterations=1, policy="inline", progress=False).status == "finished"  # still runs
