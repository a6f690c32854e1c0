"""Task reports go straight to the driver over the run's own channel, not through the scheduler.

Each replica sends one report per finished task. They used to travel as Dask events, worker
→ scheduler → this client, and that path was most of this process's CPU as workers grew:
at 8 workers, the scheduler's handling of worker messages, the client's handling of
events and the comm reads between them took about half of the driver process's CPU, more
than workbench's own bookkeeping (py-spy, issue 15's notes; the embedded cluster's
scheduler lives in this process). Now a replica sends its report to the driver's channel
server, the one its snapshots already go to (HMAC-authenticated, TLS on a TLS cluster):

- :class:`DriverInbox`, that server's sink, hands each report to the run at once and files
  snapshots in the :class:`~workbench.runtime.state.snapshots.SnapshotBook`;
- :class:`ReportRelay` passes the reports on to the run's scheduler topic for the
  ``/workbench`` dashboard page, batched: one event every ``RELAY_EVERY_S`` instead of one
  per report, each report keeping its own arrival time and worker address.

Example:
    >>> from workbench.runtime.engine.driver import Events
    >>> from workbench.runtime.replicas.replica import TaskReport
    >>> from workbench.cluster.report_events import report_event
    >>> events = Events()
    >>> inbox = DriverInbox(events, snapshots=None)
    >>> message = report_event(3, TaskReport("actor", 1, "w0", env_steps={0: 64}))
    >>> inbox.put(REPORT_KEY, 3, 1, dict(message, worker="tcp://10.0.0.7:4000"))
    >>> kind, task, report = events.queue.get_nowait()
    >>> kind, task, report.group, report.replica, report.env_steps
    ('report', 3, 'actor', 1, {0: 64})
"""

from __future__ import annotations

import threading
import time
from typing import Any

import msgpack

from workbench.cluster.report_events import report_fields
from workbench.cluster.state_export import EXPORT_PREFIX
from workbench.runtime.replicas.replica import TaskReport

__all__ = ["REPORT_KEY", "RELAY_EVERY_S", "DriverInbox", "ReportRelay", "batch_items", "scheduler_connected"]

#: the channel key of a task report (snapshots use ``snapshot:<group>``)
REPORT_KEY = "report"
#: how often the driver passes reports on to the dashboard page (it redraws every 500 ms)
RELAY_EVERY_S = 0.25
_BATCH = "batch"


class DriverInbox:
    """What the driver's channel server files things in: reports to the run's ``events``
    (and on to ``relay``), exported states to ``exports``, everything else to ``snapshots``."""

    def __init__(self, events, snapshots=None, relay: "ReportRelay | None" = None, exports=None) -> None:
        self.events = events
        self.snapshots = snapshots
        self.relay = relay
        self.exports = exports  # a workbench.cluster.state_export.ExportBox: final states

    def put(self, key: str, task: int, replica: int, value: Any) -> None:
        if self.exports is not None and key.startswith(EXPORT_PREFIX):
            self.exports.put(key, task, replica, value)
            return
        if key != REPORT_KEY:
            if self.snapshots is not None:
                self.snapshots.put(key, task, replica, value)
            return
        fields = report_fields(value)
        if fields is None:  # not a report: a peer speaking another version
            self.events.error(ValueError(f"the driver got a malformed report for task {task} from replica {replica}"))
            return
        self.events.report(task, TaskReport.from_message(fields))
        if self.relay is not None:
            self.relay.add(value)

    def fail(self, error: BaseException) -> None:
        """A message the driver could not unpickle: the run stops with that error."""
        self.events.error(error)


class ReportRelay:
    """Passes reports on to a scheduler topic in batches, from a thread of its own.

    Best effort: the page is a view, so a scheduler that cannot take a batch (gone at the
    run's end, a report msgpack cannot carry) costs that batch, never the run."""

    def __init__(self, client, topic: str, every: float = RELAY_EVERY_S) -> None:
        self.client = client
        self.topic = topic
        self.every = every
        self._pending: list[tuple[float, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workbench-report-relay", daemon=True)
        self._thread.start()

    def add(self, message: dict) -> None:
        with self._lock:
            self._pending.append((time.time(), _packed(message)))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.flush()

    def flush(self) -> int:
        """Send what has come in since the last batch; returns how many reports."""
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            try:
                self.client.log_event(self.topic, {_BATCH: batch})
            except Exception:  # see the class docstring
                return 0
        return len(batch)

    def close(self) -> None:
        """Stop the thread and send what is left (unless the thread is still stuck sending
        the last batch: a scheduler that does not answer would hold the run's teardown;
        one that is gone, while Dask tries to reconnect, would hold it 5 s for nothing)."""
        self._stop.set()
        connected = scheduler_connected(self.client)
        self._thread.join(timeout=5.0 if connected else 0.0)
        if connected and not self._thread.is_alive():
            self.flush()


def scheduler_connected(client) -> bool:
    """Whether ``client`` holds its scheduler's connection now (False while it reconnects
    after losing it, and once closed). Reads two attributes; sends nothing.

        >>> class Client: status, scheduler_comm = "connecting", None
        >>> scheduler_connected(Client())
        False
    """
    return client.status in ("running", "newly-created") and client.scheduler_comm is not None


def _packed(message: dict) -> dict:
    """``message`` with its report as msgpack ``bytes``, which the scheduler takes. A replica
    sends a report msgpack cannot take (a NumPy scalar in a metric) as a dict, so that the
    run gets it exactly; the page gets such values as plain numbers, or as text."""
    report = message.get("report")
    if isinstance(report, (bytes, bytearray)):
        return message
    try:
        return dict(message, report=msgpack.packb(report, use_bin_type=True, default=_plain))
    except (TypeError, ValueError, OverflowError):
        return dict(message, report=msgpack.packb({}, use_bin_type=True))


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # NumPy and torch scalars
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            pass
    return repr(value)


def batch_items(ts: float, message: Any) -> list[tuple[float, Any]]:
    """The (time, report event) pairs in one scheduler event: a relayed batch, or (from a
    replica of an older workbench that logged its own) a single report.

    Example:
        >>> batch_items(9.0, {"batch": [(1.0, {"task": 0}), (2.0, {"task": 1})]})
        [(1.0, {'task': 0}), (2.0, {'task': 1})]
        >>> batch_items(9.0, {"task": 5})
        [(9.0, {'task': 5})]
    """
    if isinstance(message, dict) and isinstance(message.get(_BATCH), (list, tuple)):
        return [
            (float(item[0]), item[1]) for item in message[_BATCH] if isinstance(item, (list, tuple)) and len(item) == 2
        ]
    return [(ts, message)]
