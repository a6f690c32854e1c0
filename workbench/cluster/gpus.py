"""Workers report their own GPUs, so GPU hosts need no ``--resources GPU=N``.

`GPUDetection` is a Dask ``WorkerPlugin``: on every worker (those there now and those
that join or restart later) it asks CUDA how many devices the worker process sees and
declares them as the worker's ``GPU`` resource. The scheduler then lists them, the
inventory (``connect.inventory_of``) counts them, presets put learners and GPUOnly groups
there, and each replica placed on ``gpu`` is given ``cuda:K`` (``workbench.devices``).

Rules, in order:

1. a ``GPU`` resource the worker was started with (``dask worker --resources GPU=2``) wins:
   it is the user's word, and it is what the worker's replicas share;
2. ``WORKBENCH_WORKER_GPUS=N`` in the worker's environment: offer N (0 turns GPUs off);
3. a dask-cuda worker (``dask cuda worker``: one process per GPU, its own GPU first in
   ``CUDA_VISIBLE_DEVICES``) offers 1;
4. otherwise every device the process sees (``torch.cuda.device_count()``, else CuPy's).

Without a GPU, driver or CUDA library this finds 0 and changes nothing.

Example::

    from workbench.cluster.gpus import register_gpu_detection
    register_gpu_detection(client)            # once per client; inventory_of does it for you
    inventory_of(client).gpu_workers()
"""

from __future__ import annotations

import asyncio
import os
import sys
import weakref

from distributed.diagnostics.plugin import WorkerPlugin

from workbench.devices import claim_gpus, visible_gpus

__all__ = ["GPUDetection", "detect_worker_gpus", "register_gpu_detection", "PLUGIN_NAME"]

PLUGIN_NAME = "workbench-gpus"
ENV_OVERRIDE = "WORKBENCH_WORKER_GPUS"


def detect_worker_gpus(environ=None, modules=None, probe=visible_gpus) -> int:
    """How many GPUs this worker process should offer (rules 2–4 of the module docstring).

    >>> detect_worker_gpus({"WORKBENCH_WORKER_GPUS": "2"}, {}, probe=lambda: 8)
    2
    >>> detect_worker_gpus({}, {"dask_cuda": object()}, probe=lambda: 4)
    1
    >>> detect_worker_gpus({}, {}, probe=lambda: 0)
    0
    """
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    override = environ.get(ENV_OVERRIDE)
    if override is not None and override.strip() != "":
        try:
            return max(0, int(override))
        except ValueError:
            raise ValueError(f"{ENV_OVERRIDE}={override!r} must be a whole number of GPUs") from None
    seen = probe()
    if seen and "dask_cuda" in modules:
        return 1  # dask-cuda: this worker's GPU is device 0; the others belong to its siblings
    return seen


class GPUDetection(WorkerPlugin):
    """Declares the worker's GPUs as its ``GPU`` resource (see the module docstring).

    ``count`` fixes the answer instead of asking CUDA (tests use it to give a CPU worker
    pretend GPUs; a user can use it to offer fewer).
    """

    name = PLUGIN_NAME

    def __init__(self, count: int | None = None) -> None:
        self.count = count

    async def setup(self, worker) -> None:
        declared = worker.state.total_resources.get("GPU")
        if declared is not None and not getattr(worker, "_workbench_set_gpus", False):
            # rule 1: the user's --resources GPU=N (not one this plugin set before)
            claim_gpus(int(declared))
            return
        if self.count is not None:
            count = self.count
        else:
            # CUDA's first answer can take a second (driver, NVML): not on the event loop
            count = await asyncio.get_running_loop().run_in_executor(None, detect_worker_gpus)
        claim_gpus(count)
        if count > 0 or declared is not None:
            worker._workbench_set_gpus = True
            await worker.set_resources(GPU=count)

    def teardown(self, worker) -> None:
        claim_gpus(None)


_registered: weakref.WeakSet = weakref.WeakSet()


def register_gpu_detection(client, count: int | None = None, *, force: bool = False) -> None:
    """Register `GPUDetection` on ``client``'s cluster once (later calls are free unless
    ``force``); new and restarted workers run it too. Waits until every current worker
    has reported."""
    if client in _registered and not force:
        return
    client.register_plugin(GPUDetection(count), name=PLUGIN_NAME)
    _registered.add(client)
