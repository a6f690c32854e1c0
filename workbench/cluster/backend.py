"""Running a plan on Dask: replicas live on workers, tasks are pinned to them.

Each group replica is deployed once to its worker, where a :class:`WorkbenchPlugin` keeps
it between tasks. Every task is a worker-pinned Dask task whose key starts with the group
name (``actor+env-…``, ``learner-…``), so the dashboard's task stream shows fragments by
name. A task's result (its outbox: trajectories, weights) stays on its worker until a
consumer task on another worker pulls it — worker to worker, never via the notebook. The
small report (metrics, timings) reaches the notebook as a Dask event.
"""
from __future__ import annotations

import threading
import uuid
from typing import Any

from distributed import Client, Future, WorkerPlugin, get_worker, wait

from workbench.fdg.errors import PlacementError
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import Plan, TaskSpec
from workbench.runtime.driver import _close_envs
from workbench.runtime.replica import GroupProgram, GroupReplica, TaskReport

__all__ = ["DaskBackend", "WorkbenchPlugin"]

PLUGIN_NAME = "workbench"


class WorkbenchPlugin(WorkerPlugin):
    """Worker-resident state: the replicas deployed to this worker, by (run, group, index)."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        self.replicas: dict[tuple[str, str, int], GroupReplica] = {}

    def teardown(self, worker) -> None:
        for replica in self.replicas.values():
            for ns in replica.namespaces.values():
                _close_envs(ns)
        self.replicas.clear()


def _plugin() -> WorkbenchPlugin:
    return get_worker().plugins[PLUGIN_NAME]


def _deploy(run_id: str, program: GroupProgram, index: int, count: int, notebook: dict, device: str) -> str:
    worker = get_worker()
    name = str(worker.name)
    _plugin().replicas[(run_id, program.group, index)] = GroupReplica(
        program, index, count, name, notebook, device)
    return name


def _run_task(run_id: str, task_id: str, group: str, index: int, items, inputs: dict,
              emit_keys: tuple[str, ...], _after: Any) -> dict:
    replica = _plugin().replicas[(run_id, group, index)]
    outbox, report = replica.run(items, inputs, emit_keys)
    get_worker().log_event(f"workbench-{run_id}", {"task": task_id, "report": report})
    return outbox


def _drop_run(run_id: str, dask_worker=None) -> int:
    plugin = dask_worker.plugins.get(PLUGIN_NAME) if dask_worker else None
    if plugin is None:
        return 0
    mine = [k for k in plugin.replicas if k[0] == run_id]
    for key in mine:
        for ns in plugin.replicas.pop(key).namespaces.values():
            _close_envs(ns)
    return len(mine)


def _has_plugin(dask_worker=None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


class DaskBackend:
    """The :class:`~workbench.runtime.driver.Backend` for a Dask cluster."""

    def __init__(self, client: Client, inventory: Inventory, report_timeout: float = 30.0) -> None:
        self.client = client
        self.inventory = inventory
        self.run_id = uuid.uuid4().hex[:8]
        self.report_timeout = report_timeout
        self._addresses: dict[tuple[str, int], str] = {}
        self._last: dict[tuple[str, int], Future] = {}
        self._futures: dict[str, Future] = {}
        self._reports: dict[str, TaskReport] = {}
        self._arrived = threading.Condition()
        self._topic = f"workbench-{self.run_id}"
        if not all(client.run(_has_plugin).values()):
            client.register_plugin(WorkbenchPlugin(), name=PLUGIN_NAME)
        client.subscribe_topic(self._topic, self._on_event)

    # -- Backend protocol ----------------------------------------------------------------
    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any]) -> None:
        futures = []
        for name, group in plan.groups.items():
            for index, worker_name in enumerate(group.workers):
                worker = self.inventory.find(worker_name)
                if worker is None:
                    raise PlacementError(
                        f"group {name!r} replica {index} is placed on worker {worker_name!r}, which "
                        f"is not in the cluster (workers: {', '.join(self.inventory.names)})."
                    )
                self._addresses[(name, index)] = worker.address
                futures.append(self.client.submit(
                    _deploy, self.run_id, programs[name], index, group.replicas, notebook,
                    group.device, key=f"{name}-deploy-{uuid.uuid4().hex}",
                    workers=[worker.address], allow_other_workers=False, pure=False,
                ))
        wait(futures)
        for f in futures:
            f.result()  # raises a deploy error (e.g. a notebook value that cannot pickle)

    def submit(self, spec: TaskSpec, replica: int, inputs: dict, emit_keys: tuple[str, ...]) -> Future:
        where = (spec.group, replica)
        task_id = f"{spec.group}-{uuid.uuid4().hex}"
        future = self.client.submit(
            _run_task, self.run_id, task_id, spec.group, replica, spec.items, inputs, emit_keys,
            self._last.get(where), key=task_id, workers=[self._addresses[where]],
            allow_other_workers=False, pure=False,
        )
        self._last[where] = future
        self._futures[task_id] = future
        return future

    def report(self, ref: Future) -> TaskReport:
        ref.result()  # raises the fragment's error, if any
        key = ref.key
        with self._arrived:
            if not self._arrived.wait_for(lambda: key in self._reports, timeout=self.report_timeout):
                raise TimeoutError(f"task {key} finished but its report never reached the notebook")
            report = self._reports.pop(key)
        self._futures.pop(key, None)
        return report

    def cancel(self) -> None:
        pending = [f for f in self._futures.values() if not f.done()]
        if pending:
            self.client.cancel(pending)
        self._futures.clear()

    def teardown(self) -> None:
        self.cancel()
        self._last.clear()
        try:
            self.client.unsubscribe_topic(self._topic)
            self.client.run(_drop_run, self.run_id)
        except Exception:  # the cluster may already be gone; nothing is left to free then
            pass

    # -- events --------------------------------------------------------------------------
    def _on_event(self, event) -> None:
        _, message = event
        with self._arrived:
            self._reports[message["task"]] = message["report"]
            self._arrived.notify_all()
