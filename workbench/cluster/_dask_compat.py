"""Every use of Dask's private or version-dependent internals, in one place.

workbench supports ``distributed`` in the range ``pyproject.toml`` declares. What Dask
does not offer publicly — the scheduler's event topics, forgetting a topic's handler on a
client, the ``n_workers`` argument of ``scheduler_info`` (added in 2025.x) — is reached
only through these functions, each with a fallback when the internal is not there, and
each exercised by ``tests/cluster/test_dask_compat.py`` against the installed Dask. A new
Dask release that moves an internal breaks that test, not a user's run.

Example:
    >>> topic_name("3f2a")
    'workbench-3f2a'
    >>> is_workbench_topic("workbench-3f2a"), is_workbench_topic("other")
    (True, False)
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = [
    "TOPIC_PREFIX",
    "topic_name",
    "is_workbench_topic",
    "scheduler_topics",
    "prune_topics",
    "forget_topic_handler",
    "workers_info",
    "claim_forkserver_preload",
    "nanny_spawn_environment",
    "connect_dashboard",
]

#: the scheduler event topics of workbench runs: ``workbench-<run id>``
TOPIC_PREFIX = "workbench-"


def topic_name(run_id: str) -> str:
    """The event topic a run's replicas report on."""
    return f"{TOPIC_PREFIX}{run_id}"


def is_workbench_topic(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(TOPIC_PREFIX)


def scheduler_topics(scheduler) -> dict | None:
    """The scheduler's topic → topic-state mapping (private: ``Scheduler._broker._topics``),
    or None where this Dask keeps it elsewhere."""
    topics = getattr(getattr(scheduler, "_broker", None), "_topics", None)
    return topics if isinstance(topics, dict) else None


def workbench_topic_names(scheduler) -> list[str]:
    """Names of the workbench run topics the scheduler holds (without copying their events)."""
    topics = scheduler_topics(scheduler)
    names = list(topics) if topics is not None else list(scheduler.get_events())
    return [t for t in names if is_workbench_topic(t)]


def prune_topics(keep: int, dask_scheduler=None) -> int:
    """Forget all but the newest ``keep`` finished workbench run topics (and their events):
    the scheduler's broker keeps every topic forever otherwise. Runs on the scheduler
    (``client.run_on_scheduler(prune_topics, keep)``); returns how many it forgot."""
    topics = scheduler_topics(dask_scheduler)
    if topics is None:
        return 0
    ours = [t for t, state in topics.items() if is_workbench_topic(t) and not getattr(state, "subscribers", None)]
    gone = ours[: max(0, len(ours) - keep)]
    for name in gone:
        del topics[name]
    return len(gone)


def _finished_topic(event) -> None:
    """Handler left on a finished run's topic: events still on their way take it."""


def forget_topic_handler(client, topic: str) -> None:
    """Unsubscribe ``client`` from ``topic``, leaving a no-op placeholder as its handler.

    Dask's ``unsubscribe_topic`` keeps the handler (private ``Client._event_handlers``), and
    with it whatever the handler closes over (a run's events); so the handler is swapped for
    a placeholder that holds nothing. It is not dropped: an event already on its way when
    the client unsubscribes would reach a client with no handler, and Dask then raises
    ``ValueError: No event handler known for topic`` and logs its traceback (CI saw one
    printed by ``workbench run`` after Ctrl-C). Placeholders of earlier topics go here:
    their late events landed long ago."""
    handlers = getattr(client, "_event_handlers", None)
    if isinstance(handlers, dict):
        for name in [t for t, h in handlers.items() if h is _finished_topic and t != topic]:
            handlers.pop(name)
    if isinstance(handlers, dict) and topic not in handlers:
        return  # never subscribed, or forgotten already: nothing to unsubscribe
    client.unsubscribe_topic(topic)
    if isinstance(handlers, dict):
        handlers[topic] = _finished_topic


def workers_info(client) -> dict[str, dict]:
    """address → the scheduler's record of every worker. Newer Dask returns only the first
    few workers from ``scheduler_info()`` unless asked for all (``n_workers=-1``)."""
    if "n_workers" in inspect.signature(client.scheduler_info).parameters:
        # asked of the scheduler itself, not through scheduler_info(n_workers=-1): that fills
        # the client's cached identity and then reads it back, and the client's periodic
        # refresh (every 2 s, with no workers in it) can land in between, so a busy machine
        # saw an empty list from a cluster with workers ("needs at least one worker")
        return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
    return client.scheduler_info()["workers"]


def claim_forkserver_preload(modules: list[str]) -> None:
    """Have multiprocessing's forkserver import ``modules`` before it forks a worker.

    Dask sets the forkserver's preload list itself the first time it starts a process with
    it (``distributed.utils.get_mp_context``): every package in its version report, which
    it also imports into the calling process (pandas among them). Its private flag
    ``_forkserver_preload_set`` marks the list as set so that Dask leaves this one alone."""
    import multiprocessing

    from distributed import utils

    multiprocessing.get_context("forkserver").set_forkserver_preload(modules)
    if hasattr(utils, "_forkserver_preload_set"):
        utils._forkserver_preload_set = True


def nanny_spawn_environment() -> dict[str, str]:
    """The variables Dask's nanny puts in its own process's environment right before it
    starts a worker process (``Nanny.__init__``, private): ``distributed.nanny.pre-spawn-
    environ`` (a variable already in the environment wins; None unsets a default), and a
    fixed ``PYTHONHASHSEED`` so that every worker hashes strings alike."""
    try:
        from distributed.nanny import _get_env_variables
    except ImportError:  # moved: the same rule, from the public config

        def _get_env_variables(key: str) -> dict[str, str]:
            import os

            import dask

            return {k: os.environ.get(k, str(v)) for k, v in dask.config.get(key).items() if v is not None}

    env = _get_env_variables("distributed.nanny.pre-spawn-environ")
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # Dask's own choice (dask/dask#6640)
    return env


def connect_dashboard(scheduler, prefix: str = "/") -> bool:
    """Serve Dask's dashboard (with every page registered by then) from ``scheduler``'s
    HTTP server, which was started without it (``Scheduler(dashboard=False)`` still listens
    on the dashboard's address). What ``Scheduler.__init__`` does when it starts with one;
    call it on the scheduler's event loop. False where Bokeh is not installed."""
    try:
        from distributed.dashboard import scheduler as board
    except ImportError:
        return False
    board.connect(scheduler.http_application, scheduler.http_server, scheduler, prefix=prefix)
    return True
