"""What the notebook's process runs on the workers (by ``client.run``) to control a run's
replicas there: the stop flag, which cells are busy, the fences of exact iteration
boundaries and lockstep's releases (:mod:`workbench.runtime.replicas.fence`), and dropping a
finished run. Each takes the run's id and Dask's ``dask_worker``; the replicas themselves
live in the worker's ``WorkbenchPlugin`` (:mod:`workbench.cluster.backend`).

Example::

    client.run(_fence_release, run_id, 7, workers=[...])   # lockstep: iteration 7 may begin
"""

from __future__ import annotations

from workbench.runtime.replicas.fence import Fence
from workbench.runtime.process.malloc import release_free_memory

__all__ = ["PLUGIN_NAME"]

#: the name the worker plugin holding a run's replicas is registered under
PLUGIN_NAME = "workbench"


def _has_plugin(dask_worker=None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


def _set_stopping(run_id: str, dask_worker=None) -> None:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None:
        plugin.stopping.add(run_id)


def _busy_cells(run_id: str, dask_worker=None) -> list[str]:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    deployed = [] if plugin is None else [d for (r, _, _), d in plugin.deployed.items() if r == run_id]
    return [text for d in deployed if (text := d.replica.describe_busy())]


def _fence_of(plugin, run_id: str) -> Fence:
    return plugin.__dict__.setdefault("fences", {}).setdefault(run_id, Fence())


def _fence_pause(run_id: str, dask_worker=None) -> int:
    """Phase 1 of an exact boundary, on one worker: hold its replicas of the run before
    their next iteration; the newest iteration they began (-1 for none)."""
    return _fence_of(dask_worker.plugins[PLUGIN_NAME], run_id).pause()


def _fence_close(run_id: str, boundary: int, dask_worker=None) -> None:
    _fence_of(dask_worker.plugins[PLUGIN_NAME], run_id).close_at(boundary)


def _fence_release(run_id: str, iteration: int, dask_worker=None) -> None:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and any(k[0] == run_id for k in plugin.deployed):  # not once dropped
        _fence_of(plugin, run_id).release(iteration)


def _drop_run(run_id: str, keep_stop: bool = False, dask_worker=None) -> int:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return 0
    plugin.__dict__.get("fences", {}).pop(run_id, None)
    plugin.__dict__.get("turns", {}).pop(run_id, None)
    plugin.__dict__.get("routes", {}).pop(run_id, None)
    for key in [k for k in plugin.__dict__.get("lanes", {}) if k[0] == run_id]:
        plugin.lanes.pop(key)
    mine = [k for k in plugin.deployed if k[0] == run_id]
    for key in mine:
        plugin.deployed.pop(key).close()
    if mine and not any(k[0] != run_id for k in plugin.deployed):  # nothing else running here
        release_free_memory()
    if not keep_stop:  # a stuck cell that returns one day (no nanny to end it) must then see the stop
        plugin.stopping.discard(run_id)
    return len(mine)
