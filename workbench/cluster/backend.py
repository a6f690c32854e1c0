"""Running a plan on Dask: replicas live on workers, each runs one long-lived loop task.

Deploy puts each group replica on its worker, where a :class:`WorkbenchPlugin` keeps it
(with a mailbox and a socket server for direct channels). Then one worker-pinned task per
replica runs the replica's loop for the whole run; its key starts with the group name
(``actor+env-loop-…``), so the dashboard's task stream shows fragments by name. Values
move replica to replica over the direct channels; the notebook receives only the small
task reports, as Dask events. A stop flag on each worker ends the loops.
"""
from __future__ import annotations

import pickle
import secrets
import threading
import uuid
from typing import Any

import cloudpickle
from distributed import Client, Future, WorkerPlugin, get_worker, secede
from distributed.metrics import context_meter

from workbench.fdg.errors import PlacementError
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import Plan
from workbench.runtime.channels import Mailbox, SocketPostman, SocketServer
from workbench.runtime.driver import Events, StreamSpec, close_envs
from workbench.runtime.loop import run_loop
from workbench.runtime.replica import GroupProgram, GroupReplica, TaskReport

__all__ = ["DaskBackend", "WorkbenchPlugin"]

PLUGIN_NAME = "workbench"


class _Deployed:
    """One replica on a worker: its state, mailbox and channel server."""

    def __init__(self, replica: GroupReplica, authkey: bytes, host: str) -> None:
        self.replica = replica
        self.mailbox = Mailbox(replica.program.arrival_keys)
        self.server = SocketServer(self.mailbox, host, authkey)

    def close(self) -> None:
        self.server.close()
        for ns in self.replica.namespaces.values():
            close_envs(ns)


class WorkbenchPlugin(WorkerPlugin):
    """Worker-resident state: replicas deployed here, by (run, group, index), and the
    stop flags of runs."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        self.deployed: dict[tuple[str, str, int], _Deployed] = {}
        self.stopping: set[str] = set()

    def teardown(self, worker) -> None:
        for item in self.deployed.values():
            item.close()
        self.deployed.clear()


def _plugin() -> WorkbenchPlugin:
    return get_worker().plugins[PLUGIN_NAME]


def _deploy(run_id: str, authkey: bytes, program: GroupProgram, index: int, count: int,
            notebook: dict, device: str, state: bytes | None) -> tuple[str, int]:
    worker = get_worker()
    restored = pickle.loads(state) if state is not None else None
    replica = GroupReplica(program, index, count, str(worker.name), notebook, device, restored)
    deployed = _Deployed(replica, authkey, worker.ip)
    _plugin().deployed[(run_id, program.group, index)] = deployed
    return deployed.server.address


def _loop_task(run_id: str, authkey: bytes, group: str, index: int, plan: Plan, stream: StreamSpec,
               addresses: dict, counts: dict[str, int]) -> int:
    # Leave the worker's thread pool: loops run for the whole run, and several replicas
    # (actor+env and learner, say) may share one single-threaded worker.
    secede()
    plugin = _plugin()
    worker = get_worker()
    deployed = plugin.deployed[(run_id, group, index)]
    local = {(g, i): d.mailbox for (r, g, i), d in plugin.deployed.items() if r == run_id}
    postman = SocketPostman(addresses, authkey, local)
    topic = f"workbench-{run_id}"

    def report(task: int, task_report: TaskReport) -> None:
        _mark_phases(task_report)
        worker.log_event(topic, {"task": task, "report": task_report.to_message()})

    try:
        return run_loop(deployed.replica, stream.tasks(plan), deployed.mailbox, postman, counts, report,
                        lambda: run_id in plugin.stopping)
    except BaseException:
        plugin.stopping.add(run_id)  # peers on this worker stop at once; the driver stops the rest
        raise
    finally:
        postman.close()


def _export(run_id: str, group: str, index: int) -> bytes:
    # One pickle for the whole replica: Dask would serialise a dict's values one by one,
    # and an optimizer would come back pointing at copies of its model's parameters.
    return cloudpickle.dumps(_plugin().deployed[(run_id, group, index)].replica.export_state(), protocol=5)


def _mark_phases(task_report: TaskReport) -> None:
    """Split a replica's long-lived loop task into its phases for Dask's fine performance
    metrics (dashboard: "Fine Performance Metrics", by task prefix and activity), so the
    loop is not one opaque bar. Runs in the loop task's own thread and context."""
    for fragment, seconds in task_report.compute_seconds.items():
        context_meter.digest_metric(f"{fragment} compute", seconds, "seconds")
    context_meter.digest_metric("waiting for inputs", task_report.wait_seconds, "seconds")
    context_meter.digest_metric("sending outputs", task_report.send_seconds, "seconds")
    context_meter.digest_metric("sent to other processes", task_report.sent_bytes, "bytes")


def _set_stopping(run_id: str, dask_worker=None) -> None:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None:
        plugin.stopping.add(run_id)


def _drop_run(run_id: str, dask_worker=None) -> int:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return 0
    mine = [k for k in plugin.deployed if k[0] == run_id]
    for key in mine:
        plugin.deployed.pop(key).close()
    plugin.stopping.discard(run_id)
    return len(mine)


def _pickled(state: dict | None) -> bytes | None:
    return None if state is None else cloudpickle.dumps(state, protocol=5)


def _has_plugin(dask_worker=None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


class DaskBackend:
    """The :class:`~workbench.runtime.driver.Backend` for a Dask cluster."""

    def __init__(self, client: Client, inventory: Inventory) -> None:
        self.client = client
        self.inventory = inventory
        self.run_id = uuid.uuid4().hex[:8]
        self._authkey = secrets.token_bytes(32)
        self._addresses: dict[tuple[str, int], tuple[str, int]] = {}
        self._workers: dict[tuple[str, int], str] = {}
        self._loops: list[Future] = []
        self._topic = f"workbench-{self.run_id}"
        self._stopped = threading.Event()
        if not all(client.run(_has_plugin).values()):
            client.register_plugin(WorkbenchPlugin(), name=PLUGIN_NAME)

    def deploy(self, plan: Plan, programs: dict[str, GroupProgram], notebook: dict[str, Any],
               states: dict[tuple[str, int], dict] | None = None) -> None:
        futures = {}
        for name, group in plan.groups.items():
            for index, worker_name in enumerate(group.workers):
                worker = self.inventory.find(worker_name)
                if worker is None:
                    raise PlacementError(
                        f"group {name!r} replica {index} is placed on worker {worker_name!r}, which "
                        f"is not in the cluster (workers: {', '.join(self.inventory.names)})."
                    )
                self._workers[(name, index)] = worker.address
                futures[(name, index)] = self.client.submit(
                    _deploy, self.run_id, self._authkey, programs[name], index, group.replicas,
                    notebook, group.device, _pickled((states or {}).get((name, index))),
                    key=f"{name}-deploy-{uuid.uuid4().hex}",
                    workers=[worker.address], allow_other_workers=False, pure=False,
                )
        for key, future in futures.items():
            self._addresses[key] = tuple(future.result())

    def start(self, plan: Plan, stream: StreamSpec, events: Events) -> None:
        def on_event(event) -> None:
            message = event[1]
            events.report(message["task"], TaskReport.from_message(message["report"]))

        def on_done(future: Future, key=None) -> None:
            if future.status == "error":
                events.error(future.exception())
            events.exit(*key)

        self.client.subscribe_topic(self._topic, on_event)
        counts = {name: g.replicas for name, g in plan.groups.items()}
        for key, address in self._workers.items():
            future = self.client.submit(
                _loop_task, self.run_id, self._authkey, key[0], key[1], plan, stream,
                self._addresses, counts, key=f"{key[0]}-loop-{uuid.uuid4().hex}",
                workers=[address], allow_other_workers=False, pure=False,
            )
            future.add_done_callback(lambda f, key=key: on_done(f, key))
            self._loops.append(future)

    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        self._join_loops()
        futures = {
            key: self.client.submit(_export, self.run_id, key[0], key[1], workers=[address],
                                    allow_other_workers=False, pure=False,
                                    key=f"{key[0]}-export-{uuid.uuid4().hex}")
            for key, address in self._workers.items()
        }
        return {key: pickle.loads(future.result()) for key, future in futures.items()}

    def _join_loops(self) -> None:
        for future in self._loops:
            try:
                future.result(timeout=30)
            except Exception:  # its error already reached the driver
                pass

    def stop(self) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            try:
                self.client.run(_set_stopping, self.run_id)
            except Exception:  # a worker that is gone has nothing left to stop
                pass

    def teardown(self) -> None:
        self.stop()
        self._join_loops()
        self._loops.clear()
        try:
            self.client.unsubscribe_topic(self._topic)
            self.client.run(_drop_run, self.run_id)
        except Exception:  # the cluster may already be gone; nothing is left to free then
            pass
