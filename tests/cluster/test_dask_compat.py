"""Each shim over Dask's internals (workbench/cluster/_dask_compat.py) against the installed
Dask: when a release moves one, this fails, not a user's run."""

from __future__ import annotations

import pytest

from workbench.cluster import _dask_compat as compat


def _worker_count(dask_scheduler=None) -> int:
    return len(dask_scheduler.workers)


def test_workers_info_lists_every_worker(client):
    info = compat.workers_info(client)
    assert len(info) == client.run_on_scheduler(_worker_count) >= 1
    assert all({"name", "nthreads"} <= set(worker) for worker in info.values())


def test_workers_info_is_never_emptied_by_the_clients_periodic_refresh(client):
    """The client refreshes its cached scheduler identity without workers every
    ``scheduler-info-interval``; ``scheduler_info()`` fills that cache and reads it back, so
    a refresh landing in between gave an empty worker list (a busy machine's re-placement
    once found "no worker"). Here the refresh runs every millisecond."""
    import dask
    from distributed import Client

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        with Client(client.scheduler.address, set_as_default=False) as hurried:
            counts = {len(compat.workers_info(hurried)) for _ in range(300)}
    assert counts == {client.run_on_scheduler(_worker_count)}


def test_the_scheduler_topics_are_reachable_and_pruned(client):
    names = [compat.topic_name(f"compat-test-{i}") for i in range(4)]
    for name in names:
        client.log_event(name, {"n": 1})

    def ours(dask_scheduler=None):
        return [t for t in compat.workbench_topic_names(dask_scheduler) if "compat-test" in t]

    assert sorted(client.run_on_scheduler(ours)) == sorted(names)
    assert client.run_on_scheduler(lambda dask_scheduler=None: compat.scheduler_topics(dask_scheduler) is not None)
    gone = client.run_on_scheduler(compat.prune_topics, 0)
    assert gone >= len(names)
    assert client.run_on_scheduler(ours) == []


def test_a_forgotten_topic_handler_is_replaced_by_a_placeholder_that_takes_late_events(client):
    first, second = compat.topic_name("compat-handler-1"), compat.topic_name("compat-handler-2")
    run_events = []
    client.subscribe_topic(first, run_events.append)
    assert first in client._event_handlers  # the internal the shim cleans
    compat.forget_topic_handler(client, first)
    assert client._event_handlers[first] is not run_events.append  # the run's events are let go
    # an event already on its way when the client unsubscribed: without a handler Dask
    # raises "No event handler known for topic" and logs its traceback
    client.sync(client._handle_event, first, (0.0, {"late": True}))
    assert run_events == []
    client.subscribe_topic(second, run_events.append)
    compat.forget_topic_handler(client, second)
    assert first not in client._event_handlers  # an earlier run's placeholder goes
    assert [t for t in client._event_handlers if "compat-handler" in t] == [second]
    compat.forget_topic_handler(client, second)  # twice is harmless


def test_topic_names():
    assert compat.is_workbench_topic(compat.topic_name("x"))
    assert not compat.is_workbench_topic(("workbench-x",))


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {
            "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
            "distributed.nanny.pre-spawn-environ.PYTHONHASHSEED": 7,
        },
    ],
)
def test_the_nanny_spawn_environment_is_what_a_nanny_sets(settings):
    """The environment an early-started forkserver gets (workbench.cluster.forkserver) is
    the one this Dask's nanny would set before starting a worker, under any config."""
    import dask
    from distributed import Nanny

    with dask.config.set(settings):
        assert compat.nanny_spawn_environment() == Nanny("tcp://127.0.0.1:1").pre_spawn_env


def test_the_forkserver_preload_is_ours():
    """Dask leaves the preload list alone once workbench set it (its own would import
    every package of its version report, pandas included, into this process)."""
    import multiprocessing.forkserver

    from distributed import utils

    server = multiprocessing.forkserver._forkserver
    before = server._preload_modules
    try:
        compat.claim_forkserver_preload(["numpy"])
        assert server._preload_modules == ["numpy"]
        assert utils._forkserver_preload_set is True
        utils.get_mp_context()  # Dask's own setter, as a nanny calls it
        assert server._preload_modules == ["numpy"]
    finally:
        server._preload_modules = before


def test_a_scheduler_started_without_its_dashboard_serves_it_once_connected():
    """What ``embedded_cluster(dashboard_later=True)`` relies on: the HTTP server listens
    without the dashboard's pages, and adding them later makes them answer."""
    import urllib.error
    import urllib.request

    from distributed import LocalCluster

    def answer(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return reply.status
        except urllib.error.HTTPError as exc:
            return exc.code

    with LocalCluster(
        n_workers=0,
        processes=False,
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
    ) as cluster:
        status = f"http://127.0.0.1:{cluster.scheduler.http_server.port}/status"
        assert answer(status) == 404
        assert cluster.sync(_connect_on_loop, cluster.scheduler) is True
        assert answer(status) == 200


async def _connect_on_loop(scheduler) -> bool:
    return compat.connect_dashboard(scheduler)
