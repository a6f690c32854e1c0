"""A replica's task report as a Dask event: its fields packed into one msgpack ``bytes``.

Why packed: Dask sizes every message it sends (``dask.sizeof``, recursively, to decide
whether to serialise it off the event loop), and for a report's nested dicts that
walk was half of a worker's event-loop CPU per report (``py-spy --gil`` on a replica
loop, 2026-11-23). One ``bytes`` value is sized in O(1), and msgpack (a Dask
dependency) is what Dask would have encoded the dict with anyway, so the scheduler, the
dashboard page and the driver decode plain data, never a pickle.

Example::

    >>> from workbench.runtime.replicas.replica import TaskReport
    >>> event = report_event(7, TaskReport("actor", 0, "w0", env_steps={3: 512}))
    >>> sorted(event), type(event["report"]).__name__
    (['report', 'task'], 'bytes')
    >>> report_fields(event)["env_steps"]
    {'3': 512}
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = ["add_phases", "report_event", "report_fields"]


def report_event(task: int, report) -> dict[str, Any]:
    """The event a replica logs for one finished task (``report``: a ``TaskReport``)."""
    message = report.to_message()
    try:
        packed = msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        packed = message  # a value msgpack cannot take: as before, Dask's own encoding
    return {"task": task, "report": packed}


def report_fields(message: Any) -> dict[str, Any] | None:
    """The report's fields (``TaskReport.to_message`` form) from an event's message, packed
    or not; None for a message that is not a report."""
    if not isinstance(message, dict):
        return None
    report = message.get("report")
    if isinstance(report, (bytes, bytearray, memoryview)):
        try:
            report = msgpack.unpackb(report, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException):
            return None
    return report if isinstance(report, dict) else None


def add_phases(phases: dict, task_report: Any) -> None:
    """Add one task's phases to its loop's totals. At the loop's end they become Dask fine
    performance metrics (dashboard: "Fine Performance Metrics", by task prefix and
    activity), so the long-lived loop task is not one opaque bar."""
    for fragment, seconds in task_report.compute_seconds.items():
        key = (f"{fragment} compute", "seconds")
        phases[key] = phases.get(key, 0.0) + seconds
    for key, value in (
        (("waiting for inputs", "seconds"), task_report.wait_seconds),
        (("sending outputs", "seconds"), task_report.send_seconds),
        (("sent to other processes", "bytes"), task_report.sent_bytes),
    ):
        phases[key] = phases.get(key, 0) + value
