"""A Dask worker preload for tests: while ``$WB_TEST_JOIN_GATE/armed`` exists, a worker that
starts waits, before it registers with the scheduler, until ``…/open`` exists (at most
``GATE_MAX_S``).

Why: tests/live/test_stuck_cells.py checks that a stop returns without waiting for the worker
it restarted, by the order of the scheduler's events (no worker joined before the return).
On a loaded machine a stop's teardown can outlast a worker's start-up, and the order flipped
without the stop waiting. With the gate armed before the stop and opened once the stop
returned, a restarted worker cannot join first; a stop that did wait for it would now wait
for the gate, and fail the tests' bound on its return instead.

Example (the tests' cluster)::

    PatientLocalCluster(..., env={GATE_ENV: str(folder)}, preload=["tests.live.join_gate"])
"""

from __future__ import annotations

import asyncio
import os
import time

GATE_ENV = "WB_TEST_JOIN_GATE"
#: longer than any stop's bound in the tests (so a stop that waits fails there), short
#: enough that a test that forgot to open it still ends
GATE_MAX_S = 120.0


async def dask_setup(worker) -> None:
    folder = os.environ.get(GATE_ENV)
    if not folder or not os.path.exists(os.path.join(folder, "armed")):
        return
    deadline = time.monotonic() + GATE_MAX_S
    while not os.path.exists(os.path.join(folder, "open")) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
