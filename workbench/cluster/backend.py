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
import time
import uuid
from concurrent.futures import CancelledError
from typing import Any

from distributed import Client, Future, WorkerPlugin, get_worker, secede
from distributed.comm.addressing import get_address_host
from distributed.metrics import context_meter
from distributed.utils import get_ip

from workbench.cluster._dask_compat import forget_topic_handler, prune_topics, topic_name
from workbench.cluster import liveness, restarts, worker_logs, worker_setup
from workbench.cluster.channel_security import channel_tls, cluster_uses_tls, worker_channel_tls
from workbench.cluster.dashboard_model import RUN_EVENT
from workbench.cluster.deployed import Deployed, gateways
from workbench.cluster.notebook_shipping import shipped
from workbench.cluster.report_events import add_phases, report_event
from workbench.cluster.report_relay import REPORT_KEY, DriverInbox, ReportRelay, scheduler_connected
from workbench.cluster.state_export import ExportBox, send_export
from workbench.cluster.worker_control import (
    PLUGIN_NAME,
    _busy_cells,
    _drop_run,
    _fence_close,
    _fence_of,
    _fence_pause,
    _fence_release,
    _has_plugin,
    _set_stopping,
)
from workbench.errors import (
    FragmentRuntimeError,
    PlacementError,
    WorkbenchError,
    WorkerLostError,
    WorkerUnreachableError,
)
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import Plan
from workbench.runtime.transport.channels import SocketServer, dumps_state
from workbench.runtime.transport.socket_postman import SocketPostman
from workbench.runtime.engine.backend import Backend, Events, StreamSpec, run_replica
from workbench.runtime.engine.driver import STOP_GRACE_S
from workbench.runtime.replicas.fence import Fence
from workbench.runtime.replicas.lanes import join_lanes
from workbench.runtime.state.randomness import GeneratorTurns
from workbench.runtime.replicas.replica import GroupProgram, GroupReplica, TaskReport
from workbench.runtime.state.snapshots import DRIVER, SnapshotBook

__all__ = ["DaskBackend", "WorkbenchPlugin"]

#: after a loop fails, how long to wait for the scheduler to notice a dead worker
LOSS_GRACE_SECONDS = 5.0
#: finished runs whose events the scheduler keeps (the /workbench page can show them)
KEEP_TOPICS = 10
#: the longest the run's once-a-second look at the cluster's workers may take
LIVENESS_CALL_S = 3.0
#: the longest the driver waits for the workers' word that an iteration was released
RELEASE_WAIT_S = 1.0


class WorkbenchPlugin(WorkerPlugin):
    """Worker-resident state: replicas deployed here, by (run, group, index), and the
    stop flags of runs."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        self.deployed: dict[tuple[str, str, int], Deployed] = {}
        self.stopping: set[str] = set()
        #: per run, the fence this worker's replicas stop at for an exact boundary
        self.fences: dict[str, Fence] = {}

    def teardown(self, worker) -> None:
        for item in self.deployed.values():
            item.close()
        self.deployed.clear()


def _plugin() -> WorkbenchPlugin:
    return get_worker().plugins[PLUGIN_NAME]


def _deploy(
    run_id: str,
    authkey: bytes,
    program: GroupProgram,
    index: int,
    count: int,
    notebook: dict,
    device: str,
    state: bytes | None,
    tls: bool = False,
) -> tuple[str, int]:
    worker = get_worker()
    restored = pickle.loads(state) if state is not None else None
    plugin = _plugin()
    turns = plugin.__dict__.setdefault("turns", {}).setdefault(run_id, GeneratorTurns())  # one per run here
    replica = GroupReplica(program, index, count, str(worker.name), notebook, device, restored, turns)
    routes = plugin.__dict__.setdefault("routes", {}).setdefault(run_id, {})
    deployed = Deployed(replica, authkey, worker.ip, tls, routes)
    plugin.deployed[(run_id, program.group, index)] = deployed
    return deployed.server.address


def _loop_task(
    run_id: str,
    authkey: bytes,
    group: str,
    index: int,
    plan: Plan,
    stream: StreamSpec,
    addresses: dict,
    counts: dict[str, int],
    tls: bool = False,
) -> int:
    # ``addresses`` includes the driver's channel server (DRIVER): reports and snapshots
    # Leave the worker's thread pool: loops run for the whole run, and several replicas
    # (actor+env and learner, say) may share one single-threaded worker.
    secede()
    plugin = _plugin()
    worker = get_worker()
    deployed = plugin.deployed[(run_id, group, index)]
    local = {(g, i): d.mailbox for (r, g, i), d in plugin.deployed.items() if r == run_id}
    join_lanes(
        plugin.__dict__.setdefault("lanes", {}),
        (run_id, group),
        deployed.replica,
        [i for (r, g, i) in plugin.deployed if r == run_id and g == group],
    )  # lanes=True
    postman = SocketPostman(addresses, authkey, local, worker_channel_tls() if tls else None)
    phases: dict[tuple[str, str], float] = {}

    def report(task: int, task_report: TaskReport) -> None:
        add_phases(phases, task_report)
        # to the driver directly (see workbench.cluster.report_relay), with this worker's
        # address for the dashboard page, as Dask's own events carried it
        message = dict(report_event(task, task_report), worker=worker.address)
        postman.send(DRIVER, REPORT_KEY, task, index, message)

    failed: WorkbenchError | None = None
    try:
        # an error stops this worker's replicas of the run at once (the driver stops the
        # rest) and is the task's outcome: Dask carries it to the driver (loop_ended)
        return run_replica(
            deployed.replica,
            plan,
            stream,
            deployed.mailbox,
            postman,
            counts,
            report,
            stopping=lambda: run_id in plugin.stopping,
            stop=lambda: plugin.stopping.add(run_id),
            fence=None if plan.policy.asynchronous else _fence_of(plugin, run_id),
        )
    except WorkbenchError as exc:  # a cell's error, say: raised below, without its context
        failed = exc
    except (ConnectionError, EOFError) as exc:
        # a peer's process died under this replica's send: not this task's fault, so no
        # "Compute Failed" in the worker's log — the driver finds the dead worker and
        # re-places the run
        return PeerLost(f"{type(exc).__name__}: {exc}")
    finally:
        postman.close()
        # once per phase for the whole loop: Dask's ledger of this task keeps every
        # digest_metric call until the task ends, and this task lasts the whole run
        # (one call per report grew worker memory ~1 KB per iteration, found by the soak)
        for (label, unit), value in phases.items():
            context_meter.digest_metric(label, value, unit)
    # Dask pickles an error with its context (tblib): the cell's own exception, which may
    # hold what does not pickle (a lock) — the driver would then get a bare Exception. Our
    # error carries the cell's traceback as text already, so it goes without.
    failed.__context__ = failed.__cause__ = None
    raise failed


class PeerLost(str):
    """What a loop returns when a channel to another replica broke (its process died)."""


def _export(run_id: str, group: str, index: int, driver: tuple, authkey: bytes, tls: bool) -> int:
    # One pickle for the whole replica (an optimizer must come back pointing at its model's
    # parameters), sent over the run's channel: Dask moved a 3 GB result at ~200 MB/s
    return send_export(
        _plugin().deployed[(run_id, group, index)].replica,
        group,
        index,
        driver,
        authkey,
        worker_channel_tls() if tls else None,
    )


def _looks_like_loss(exc: BaseException) -> bool:
    """Errors a dying process causes in the others (sockets, Dask's comms and task loss)."""
    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    return isinstance(exc, (ConnectionError, EOFError, OSError, CommClosedError, KilledWorker))


def _driver_host(inventory: Inventory) -> str:
    """Where workers can reach this process: loopback when every worker is on it (the
    embedded cluster), else this machine's address on the route to the first worker."""
    hosts = {get_address_host(w.address) for w in inventory.workers}
    if hosts <= {"127.0.0.1", "localhost"}:
        return "127.0.0.1"
    return get_ip(next(iter(sorted(hosts))))


def _ignore(event) -> None:
    """The run's topic handler: the driver has each report already (see ``start``)."""


def loop_ended(events: Events, future: Future, key: tuple[str, int]) -> None:
    """A replica's loop task ended: its error (or the peer it lost) to the driver, then its exit.

    A loop can be cancelled between finishing and this reading its result (its worker
    restarted or left, the run released it): that is an end like any other, not a
    ``FutureCancelledError`` traceback in Dask's callback log — a lost worker is the
    driver's to find and say, in one line (docs/faults.md).
    """
    try:
        if future.status == "error":
            events.error(future.exception())
        elif future.status == "finished" and isinstance(lost := future.result(), PeerLost):
            events.error(ConnectionError(f"{key[0]}[{key[1]}] lost a peer: {lost}"))
    except CancelledError:
        pass
    finally:
        events.exit(*key)


class DaskBackend(Backend):
    """The :class:`~workbench.runtime.engine.backend.Backend` for a Dask cluster."""

    #: each worker's replicas of a run wait at its fence (worker_control): exact boundaries
    fenced = True

    def __init__(self, client: Client, inventory: Inventory, lost_after: float = 10.0) -> None:
        self.client = client
        self.inventory = inventory
        #: how soon a worker that stops answering is called lost (the run option lost_after)
        self._loss_bound = liveness.LossBound(lost_after)
        #: kept for the error if the scheduler is lost (the client forgets it once closed)
        self._scheduler_address = str(getattr(client.scheduler, "address", None) or "(address unknown)")
        self.run_id = uuid.uuid4().hex[:8]
        self._authkey = secrets.token_bytes(32)
        #: on a TLS cluster every replica channel and the driver's channel use TLS too (the
        #: cluster's certificates; see workbench.cluster.channel_security); plain otherwise
        self._tls = cluster_uses_tls(client)
        self._addresses: dict[tuple[str, int], tuple[str, int]] = {}
        self._workers: dict[tuple[str, int], str] = {}
        self._loops: list[Future] = []
        #: loops whose cell never returned, found at teardown: replica → its loop's future
        #: (cancelled once its worker is ended), and what each replica runs
        self._stuck: dict[tuple[str, int], Future] = {}
        self._stuck_cells: list[str] = []
        self._topic = topic_name(self.run_id)
        #: set when a stop already waited its grace for a stuck cell (teardown then doesn't)
        self.overdue = False
        self._asynchronous = False
        self._stopped = threading.Event()
        self.snapshots: SnapshotBook | None = None
        #: where replicas send reports and snapshots, and what passes reports on to the page
        self._driver_server: SocketServer | None = None
        self._relay: ReportRelay | None = None
        if not all(client.run(_has_plugin).values()):
            client.register_plugin(WorkbenchPlugin(), name=PLUGIN_NAME)
        # what makes the embedded cluster's workers fast, on the user's own workers too
        worker_setup.ensure_worker_setup(client)
        # a fragment's error is reported once, by the run: not also as Dask's "Compute Failed"
        worker_logs.ensure_quiet_task_logs(client)

    def announce(self, kind: str, message: str, iteration: int) -> None:
        """Put what happened to the run (a lost worker's line) on this stretch's topic, where
        the dashboard page shows it above the plots. Best effort, as every page update."""
        try:
            self.client.log_event(self._topic, {RUN_EVENT: {"kind": kind, "message": message, "iteration": iteration}})
        except Exception:  # the page is a view: a scheduler that cannot take it costs the line there
            pass

    def deploy(
        self,
        plan: Plan,
        programs: dict[str, GroupProgram],
        notebook: dict[str, Any],
        states: dict[tuple[str, int], dict] | None = None,
    ) -> None:
        placed = {}
        for name, group in plan.groups.items():
            for index, worker_name in enumerate(group.workers):
                worker = self.inventory.find(worker_name)
                if worker is None:
                    raise PlacementError(
                        f"group {name!r} replica {index} is placed on worker {worker_name!r}, which "
                        f"is not in the cluster (workers: {', '.join(self.inventory.names)})."
                    )
                placed[(name, index)] = worker.address
        self._workers.update(placed)
        saved = {key: dumps_state(state) for key, state in (states or {}).items()}
        with shipped(self.client, notebook, placed.values()) as shipped_notebook:
            futures = {
                key: self.client.submit(
                    _deploy,
                    self.run_id,
                    self._authkey,
                    programs[key[0]],
                    key[1],
                    plan.groups[key[0]].replicas,
                    shipped_notebook,
                    plan.groups[key[0]].device,
                    saved.get(key),
                    self._tls,
                    key=f"{key[0]}-deploy-{uuid.uuid4().hex}",
                    workers=[address],
                    allow_other_workers=False,
                    pure=False,
                )
                for key, address in placed.items()
            }
            for key, future in futures.items():
                self._addresses[key] = tuple(future.result())

    def start(self, plan: Plan, stream: StreamSpec, events: Events) -> None:
        # reports come over the driver's channel (workbench.cluster.report_relay); the relay
        # puts them on the run's topic for the dashboard page. Subscribed, so that the topic
        # counts as in use (prune_topics keeps it) while the run lasts.
        self.client.subscribe_topic(self._topic, _ignore)
        self._relay = ReportRelay(self.client, self._topic)
        counts = {name: g.replicas for name, g in plan.groups.items()}
        self._asynchronous = plan.policy.asynchronous
        addresses = gateways(self._workers, self._addresses)
        if stream.snapshot_every or stream.full_snapshot_every or stream.clip_every:
            # replicas send their state here between iterations; the run restores from it
            # when a worker dies
            self.snapshots = SnapshotBook(counts, on_complete=events.on_snapshot)
        # HMAC-authenticated like every channel, TLS on a TLS cluster
        self._exports = ExportBox()  # final states (keep_state) arrive here, see export
        self._driver_server = SocketServer(
            DriverInbox(events, self.snapshots, self._relay, self._exports),
            _driver_host(self.inventory),
            self._authkey,
            self._driver_tls(),
        )
        addresses[DRIVER] = self._driver_server.address
        for key, address in self._workers.items():
            future = self.client.submit(
                _loop_task,
                self.run_id,
                self._authkey,
                key[0],
                key[1],
                plan,
                stream,
                addresses,
                counts,
                self._tls,
                key=f"{key[0]}-loop-{uuid.uuid4().hex}",
                workers=[address],
                allow_other_workers=False,
                pure=False,
            )
            future.add_done_callback(lambda f, key=key: loop_ended(events, f, key))
            self._loops.append(future)

    def _driver_tls(self):
        """This process's channel TLS contexts (the client's certificates), or None."""
        if not self._tls:
            return None
        return channel_tls(self.client.security, "client", "this notebook's Dask client")

    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        self._join_loops()
        futures = {
            key: self.client.submit(
                _export,
                self.run_id,
                key[0],
                key[1],
                self._driver_server.address,
                self._authkey,
                self._tls,
                workers=[address],
                allow_other_workers=False,
                pure=False,
                key=f"{key[0]}-export-{uuid.uuid4().hex}",
            )
            for key, address in self._workers.items()
        }
        sizes = {key: future.result() for key, future in futures.items()}
        return {
            key: pickle.loads(self._exports.take(key, size, lambda a=self._workers[key]: a in self.lost_workers()))
            for key, size in sizes.items()
        }

    def _join_loops(self) -> None:
        gone = set(self.lost_workers())
        alive = []
        for key, future in zip(self._workers, self._loops):
            if self._workers[key] in gone:
                future.cancel()  # its worker died: the task would wait for it forever
            else:
                alive.append(future)
        # exception(), not result(): re-raising a loop's error would add this frame (and
        # with it the futures) to the traceback of the exception the user holds as run.error
        deadline = time.monotonic() + (1.0 if self.overdue else STOP_GRACE_S)
        for future in alive:
            try:
                future.exception(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # timed out or cancelled: the loop is dropped with the run
                pass
        self._stuck = {key: f for key, f in zip(self._workers, self._loops) if f in alive and not f.done()}
        if self._stuck:  # say which cells while their replicas are still there to ask
            self._stuck_cells = self.busy_cells() or [f"replica {k[1]} of {k[0]}" for k in self._stuck]

    def busy_cells(self) -> list[str]:
        """What each of the run's replicas is running (asked of the workers)."""
        try:
            answers = self.client.run(_busy_cells, self.run_id, workers=sorted(set(self._workers.values())))
        except Exception:  # a worker that does not answer has nothing to say
            return []
        return [text for texts in answers.values() for text in texts]

    def _restart_stuck(self) -> None:
        """Loops whose cell never returns keep their worker busy for good: end those
        workers' processes (their nannies start fresh ones, which the next run waits for:
        see :mod:`workbench.cluster.restarts`). Returns without waiting for the new ones."""
        stuck, cells = self._stuck, self._stuck_cells
        if not stuck:
            return
        self._stuck = {}
        addresses = sorted({self._workers[k] for k in stuck})
        outcome = restarts.end_workers(self.client, addresses, {a: self._name_of(a) for a in addresses})
        # their tasks may only run on the ended workers: left alone, the scheduler would keep
        # them waiting for those addresses for good (and the client its futures)
        for future in stuck.values():
            future.cancel()
        print(f"workbench: {'; '.join(cells)}; {outcome}", flush=True)

    # -- worker loss -------------------------------------------------------------------
    def lost_workers(self) -> list[str]:
        """Addresses of workers holding this run's replicas that have left the cluster."""
        unheard = self._unheard_for()
        return [] if unheard is None else sorted({a for a in self._workers.values() if a not in unheard})

    def _unheard_for(self) -> dict[str, float] | None:
        """Every worker's seconds since the scheduler heard from it; None without an answer."""
        if not self._workers or self.scheduler_lost():  # no scheduler to ask (scheduler_lost says so)
            return None
        # bounded: a scheduler killed mid-call would hold the run for Dask's whole
        # reconnect (10 s) before the scheduler's loss is even looked at
        return liveness.unheard_for(self.client, LIVENESS_CALL_S)

    def scheduler_lost(self) -> str | None:
        """The scheduler's address if this client has lost it (reconnecting, or closed after
        failing to: every future was cancelled then), else None. Reads two attributes; no
        message is sent, so it answers at once when the scheduler is gone."""
        return None if scheduler_connected(self.client) else self._scheduler_address

    def check(self) -> None:
        """Called about once a second: :class:`WorkerLostError` for a worker that left the
        cluster; :class:`WorkerUnreachableError`, after retiring them, for workers that stopped
        answering (frozen, or cut off) within the run's ``lost_after`` (see
        :class:`~workbench.cluster.liveness.LossBound`)."""
        unheard = self._unheard_for()
        if unheard is None:
            return
        ours = set(self._workers.values())
        gone = sorted(a for a in ours if a not in unheard)
        if gone:
            raise WorkerLostError([self._name_of(a) for a in gone])
        suspected = liveness.suspects({a: unheard[a] for a in ours}, self._loss_bound)
        if not suspected:
            return
        servers: dict[str, tuple[str, int]] = {}
        for key, address in self._workers.items():
            if address in suspected:
                servers.setdefault(address, self._addresses[key])
        started = time.monotonic()
        lost = liveness.lost_among(
            self.client, servers, {a: unheard[a] for a in servers}, self._loss_bound, tls=self._driver_tls()
        )
        if not lost:
            return
        decided_after = max(unheard[a] for a in lost) + time.monotonic() - started
        try:
            liveness.retire(self.client, lost)
        except Exception:  # the scheduler itself is unreachable: its TTL will do it
            pass
        raise WorkerUnreachableError([self._name_of(a) for a in lost], decided_after)

    def failure(self, exc: BaseException) -> BaseException:
        if isinstance(exc, FragmentRuntimeError):
            return exc  # the user's code raised: no worker is to blame
        # a peer's socket broke, or the loop's task was lost: wait a moment for the
        # scheduler to notice a dead worker before calling it the user's error
        grace = LOSS_GRACE_SECONDS if _looks_like_loss(exc) else 0.0
        deadline = time.monotonic() + grace
        if not grace:
            gone = self.lost_workers()
            if gone:
                lost = WorkerLostError([self._name_of(a) for a in gone])
                lost.__cause__ = exc
                return lost
        while time.monotonic() < deadline:
            gone = self.lost_workers()
            if gone:
                lost = WorkerLostError([self._name_of(a) for a in gone])
                lost.__cause__ = exc
                return lost
            time.sleep(0.2)
        return exc

    def _name_of(self, address: str) -> str:
        info = self.inventory.find(address)
        return info.name if info is not None else address

    def fence(self, at_least: int) -> int | None:
        """Close every replica of the run at one exact iteration boundary ≥ ``at_least``
        (see :mod:`workbench.runtime.replicas.fence`): pause them all, then close at one past the
        newest iteration any began. None under an asynchronous policy, or when a worker
        does not answer (the run then stops as before; the loss is found by ``check``)."""
        if self._asynchronous or self.scheduler_lost():  # (without one, it would wait out a reconnect)
            return None
        workers = sorted(set(self._workers.values()))
        try:
            newest = self.client.run(_fence_pause, self.run_id, workers=workers)
            boundary = max(max(newest.values(), default=-1) + 1, at_least)
            self.client.run(_fence_close, self.run_id, boundary, workers=workers)
        except Exception:  # a worker gone mid-fence: stop without one
            return None
        return boundary

    def release(self, iteration: int) -> None:
        """The replicas may begin ``iteration`` (one round trip to the workers): lockstep's,
        or the driver's window. Not tried without a scheduler: it would wait out Dask's
        reconnect before the loss is looked at."""
        if self.scheduler_lost():
            return
        try:
            # bounded: the scheduler delivers to every worker at once, and only the reply of
            # one cut off would keep the driver (and its look for lost workers) waiting for
            # Dask's TCP timeout, 30 s; giving up waiting sends nothing back
            self.client.run(
                _fence_release,
                self.run_id,
                iteration,
                workers=sorted(set(self._workers.values())),
                callback_timeout=RELEASE_WAIT_S,
            )
        except Exception:  # a worker that is gone, or cut off, is found by check()
            pass

    def activity(self) -> dict[str, tuple[int, float | None]]:
        """Per replica: steps finished, CPU seconds of its loop (workbench.runtime.process.stall)."""
        loops = {future.key: key for key, future in zip(self._workers, self._loops)}
        return liveness.loop_activity(self.client, self.run_id, loops, sorted(set(self._workers.values())), PLUGIN_NAME)

    def env_step_counts(self) -> dict[str, int]:
        """Each replica's own env-step count (in the run), read from its worker."""
        return liveness.env_step_counts(self.client, self.run_id, sorted(set(self._workers.values())), PLUGIN_NAME)

    def stop(self) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            if self.scheduler_lost():  # nothing reaches the workers: don't wait out a reconnect
                return
            try:
                self.client.run(_set_stopping, self.run_id, callback_timeout=LIVENESS_CALL_S)
            except Exception:  # a worker that is gone (or cut off) has nothing left to stop
                pass

    def teardown(self) -> None:
        self.stop()
        self._join_loops()
        self._loops.clear()
        if self._driver_server is not None:
            self._driver_server.close()
        if self._relay is not None:
            self._relay.close()
        try:
            forget_topic_handler(self.client, self._topic)
            if self.scheduler_lost():
                return
            self.client.run_on_scheduler(prune_topics, KEEP_TOPICS)
            self.client.run(_drop_run, self.run_id, bool(self._stuck))
        except Exception:  # the cluster may already be gone; nothing is left to free then
            pass
        self._restart_stuck()
