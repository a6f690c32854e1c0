"""The lean worker settings (workbench.cluster.quiet_workers) do what they say on real Dask workers."""

from __future__ import annotations

import logging

import dask
import pytest
from distributed import Client, LocalCluster

from workbench.cluster.quiet_workers import QUIET_WORKER_CONFIG, environment


def _background(dask_worker=None) -> dict:
    return {
        "periodic": sorted(dask_worker.periodic_callbacks),
        "tick_s": dask_worker._tick_interval,
        "profile": dask.config.get("distributed.worker.profile.enabled"),
        "monitor": dask.config.get("distributed.admin.system-monitor.interval"),
    }


def test_the_environment_variables_are_the_config_as_dask_reads_them():
    """What the docs tell users to put before ``dask worker`` is parsed by Dask's own
    environment loader into exactly the lean config."""
    parsed = dask.config.collect_env(environment())
    for key, value in QUIET_WORKER_CONFIG.items():
        node = parsed
        for part in key.replace("-", "_").split("."):
            node = node[next(k for k in node if k.replace("-", "_") == part)]
        assert node == value, key


def test_workers_started_under_the_lean_config_do_less_in_the_background():
    with (
        dask.config.set(QUIET_WORKER_CONFIG),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        lean = next(iter(client.run(_background).values()))
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        default = next(iter(client.run(_background).values()))
    assert "profile" in default["periodic"] and "profile" not in lean["periodic"]
    assert lean["profile"] is False and lean["monitor"] == "5s"
    assert lean["tick_s"] == pytest.approx(1.0) and default["tick_s"] < lean["tick_s"]


@pytest.mark.parametrize("value", ["0", "-3", "two", "1.5"])
def test_a_worker_count_override_that_is_not_a_positive_whole_number_is_refused(value):
    from workbench.cluster.quiet_workers import embedded_worker_count

    with pytest.raises(ValueError, match="WORKBENCH_WORKERS.*whole number"):
        embedded_worker_count({"WORKBENCH_WORKERS": value}, cores=8)


def test_the_embedded_cluster_is_sized_to_the_usable_cores_at_least_two():
    from workbench.cluster.pinning import usable_cores
    from workbench.cluster.quiet_workers import embedded_worker_count

    assert embedded_worker_count({}) == max(2, len(usable_cores()))
    assert embedded_worker_count({}, cores=32) == 32
