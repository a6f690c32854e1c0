"""On Python 3.11 the workers of workbench's clusters run without Dask's statistical
profiler: its ``sys._current_frames()`` can deadlock a worker against a thread starting
(cpython#116969), which froze a deploy for 467 s in CI (workbench.cluster.lean)."""
from __future__ import annotations

import sys


def _profiling(dask_worker=None) -> tuple:
    import dask

    return dask.config.get("distributed.worker.profile.enabled"), "profile" in dask_worker.periodic_callbacks


def test_workers_profile_only_where_it_cannot_deadlock(client):
    expected = sys.version_info[:2] != (3, 11)
    assert set(client.run(_profiling).values()) == {(expected, expected)}
