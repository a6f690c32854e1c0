"""Keep Dask's own "Compute Failed" log of workbench's tasks out of the user's output.

When a fragment raises on a worker, its loop task fails with the fragment's error, and
Dask's worker logs the failure at ERROR level — a ``distributed.worker - ERROR - Compute
Failed`` block with the error as an escaped repr — on the worker's stderr, which for the
embedded cluster is the user's terminal or notebook. The run then reports the same error
properly (fragment, replica, cell line). :class:`QuietWorkbenchTasks` is a
``WorkerPlugin`` that adds a :class:`TaskFailureFilter` to the worker's
``distributed.worker`` logger, dropping exactly those records whose task key is one of
workbench's (``GROUP-loop-…``, ``GROUP-deploy-…``, ``GROUP-export-…``); every other task's
failure is logged as Dask always does.

Example:
    >>> import logging
    >>> f = TaskFailureFilter()
    >>> record = logging.LogRecord("distributed.worker", logging.ERROR, "", 0,
    ...     "Compute Failed\\nKey:       %s\\n", ("actor+env-loop-0123456789abcdef0123456789abcdef",), None)
    >>> f.filter(record)
    False
    >>> record.args = ("inc-123",)
    >>> f.filter(record)
    True
"""

from __future__ import annotations

import logging
import re

from distributed import WorkerPlugin

__all__ = ["TaskFailureFilter", "QuietWorkbenchTasks", "ensure_quiet_task_logs", "PLUGIN_NAME"]

PLUGIN_NAME = "workbench-quiet-task-logs"

#: the keys DaskBackend gives its tasks: GROUP-KIND-<uuid4 hex>
WORKBENCH_KEY = re.compile(r"-(?:loop|deploy|export)-[0-9a-f]{32}$")


class TaskFailureFilter(logging.Filter):
    """Drops Dask's "Compute Failed" records for workbench's own task keys."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Compute Failed") or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not WORKBENCH_KEY.search(str(args[0]))


def install(logger_name: str = "distributed.worker") -> None:
    """Add the filter to ``logger_name`` in this process, once."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, TaskFailureFilter) for f in logger.filters):
        logger.addFilter(TaskFailureFilter())


class QuietWorkbenchTasks(WorkerPlugin):
    """Installs :class:`TaskFailureFilter` on a worker (Dask runs it on workers that join
    or restart later too)."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        install()


def _has_it(dask_worker=None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


def ensure_quiet_task_logs(client) -> None:
    """Register :class:`QuietWorkbenchTasks` unless every worker already has it; the
    client's process (a LocalCluster with ``processes=False``) gets the filter too."""
    install()
    if not all(client.run(_has_it).values()):
        client.register_plugin(QuietWorkbenchTasks(), name=PLUGIN_NAME)
