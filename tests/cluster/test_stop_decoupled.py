"""A stop ends a run whose actors read nothing from the learner within a few iterations.

Such actors wait for nothing the learner sends, so without a bound they ran ahead to the
end of the run, and the stop's exact boundary (one past the newest iteration any replica
had begun, workbench.runtime.replicas.fence) was the run's end: a coarse README-style FDG stopped at
iteration 3 of 1000 trained on to 1000/1000 for another 55 s. Now a synchronous run's
replicas begin at most ``LOOKAHEAD`` iterations past the first one not yet recorded, so a
stop lands within that many. The bounds here are counted in iterations (the mechanism's),
never in seconds; the counts are compared with the env replicas' own counters.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import workbench as wb
from tests.runtime.test_stop_counts import ENVS, StopAt, own_counts
from workbench.runtime.engine.driver import LOOKAHEAD
from workbench.runtime.replicas.fence import Fence

STEPS = 5
STOP_AT = 3  # the row whose logger asks for the stop
#: cells of a decoupled loop: the actor acts on the observation alone, the learner is slower
#: than the env side (it would fall ever further behind the actors)
DECOUPLED = (
    ("env", "obs = np.zeros(ENVS // replica.count)", "init"),
    ("actor", "action = obs + 1", "step"),
    ("env", "obs = action * 0.5\nreward = np.ones_like(obs)", "step"),
    ("learner", "total = 0.0", "init"),
    ("learner", "time.sleep(0.05)\ntotal += float(reward.sum())", "iteration"),
)


def decoupled_fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "time": time, "ENVS": ENVS})
    for name, code, rate in DECOUPLED:
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def assert_counts_agree(run) -> None:
    """Every row there, in order, and every env step the envs took is in one of them."""
    assert [row["iteration"] for row in run.rows] == list(range(run.completed_iterations))
    own = own_counts(run)
    assert sum(own.values()) == run.env_steps == run.completed_iterations * STEPS * ENVS
    assert sorted(run.replica_env_steps.values()) == sorted(own.values())
    assert run.unfinished_env_steps == 0


@pytest.mark.parametrize("policy", ["inline", "coarse", "fine"])
def test_a_stop_ends_a_decoupled_run_within_the_lookahead(policy, client):
    fdg = decoupled_fdg()
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = fdg.run(iterations=1000, steps=STEPS, policy=policy, progress=False, loggers=[StopAt(fdg, STOP_AT)], **kwargs)
    assert run.status == "stopped"
    # asked with row STOP_AT: the replicas had begun at most LOOKAHEAD past the first row
    # not yet recorded (STOP_AT + 1), and the boundary is one past the newest begun
    # (before: coarse recorded 210 of 1000 here, the envs' whole head start)
    assert STOP_AT + 1 <= run.completed_iterations <= STOP_AT + 1 + LOOKAHEAD + 2, run.summary()
    assert_counts_agree(run)


def test_a_stop_from_another_thread_ends_a_decoupled_coarse_run(client):
    fdg = decoupled_fdg()
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "run", fdg.run(iterations=1000, steps=STEPS, policy="coarse", cluster=client, progress=False)
        )
    )
    thread.start()
    recorded = _rows_once(fdg, STOP_AT + 1)
    fdg.stop()
    thread.join(timeout=120)
    run = result["run"]
    assert run.status == "stopped"
    # one more than a logger's stop: the row being recorded as it came may have been
    # decided already, and then the next one ends the stretch
    assert run.completed_iterations <= recorded + LOOKAHEAD + 3, run.summary()
    assert_counts_agree(run)


@pytest.fixture
def _background_joined(ip):
    """The shell outlives a test: its background run must not reach the next."""
    magics = ip.magics_manager.registry["WorkbenchMagics"]
    yield magics
    if magics._background is not None:
        magics._background.join(timeout=60)
    magics._background = None


def test_fdg_stop_ends_a_decoupled_background_run(ip, client, _background_joined):
    ip.user_ns.update(time=time, ENVS=ENVS)
    for name, code, rate in DECOUPLED:
        flag = {"init": " --init", "step": "", "iteration": " --every iteration"}[rate]
        ip.run_cell_magic("fragment", name + flag, code + "\n")
    ip.run_line_magic(
        "fdg",
        f"run --background --policy coarse --cluster {client.scheduler.address} "
        f"--iterations 1000 --steps {STEPS} --no-progress",
    )
    recorded = _rows_once(_background_joined.fdg, STOP_AT + 1)
    run = ip.run_line_magic("fdg", "stop")
    assert run is not None and run.status == "stopped"
    assert run.completed_iterations <= recorded + LOOKAHEAD + 3, run.summary()
    assert_counts_agree(run)


def test_a_closed_fence_lets_every_iteration_before_its_boundary_begin():
    # a process released only to 2 when another's replicas had begun 4 (the boundary, 5,
    # is one past that): its replicas must still run 3 and 4, or the boundary never comes
    fence = Fence()
    fence.release(2)
    fence.close_at(5)
    waited = []

    def stopped() -> bool:  # asked only by a replica held at the fence: it ends the wait
        waited.append(True)
        return True

    assert [fence.enter(("env", 0), i, stopped) for i in range(6)] == [True] * 5 + [False]
    assert not waited


def _rows_once(fdg, rows: int) -> int:
    """Wait until the run being trained has recorded ``rows`` rows; how many it has then."""
    deadline = time.monotonic() + 120  # a hang guard, not a bound
    while time.monotonic() < deadline:
        run = fdg.last_run
        if run is not None and run.status == "running" and len(run.rows) >= rows:
            return len(run.rows)
        time.sleep(0.01)
    raise AssertionError(f"the run never recorded {rows} rows")
