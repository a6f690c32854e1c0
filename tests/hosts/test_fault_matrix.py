"""Faults as a class: for each kind of worker a run uses (the learner's, an actor's, an env's,
a buffer's, a reward's) and each fault (its process killed, its host's link down, its
process frozen with SIGSTOP), on namespace hosts with `dask worker --nthreads 1` started as
a user would, the run says ONE line at the moment it decides — which worker, what it held,
where that went, how many iterations ran again — and goes on to finish every iteration.
A freeze or a cut is decided within the run's ``lost_after`` (here 6 s), not Dask's 30 s.

The FDG (``drive_run.five_kinds_fdg``) gives each kind a group of its own; the kind under
test sits alone on worker w2, every other on w1, so the fault hits that kind's worker."""

from __future__ import annotations

import re

import pytest

from tests.hosts.drive_run import KINDS

ITERATIONS = 12
AT = 4
LOST_AFTER = 6.0
#: how much later than ``lost_after`` a loaded 2-core box may decide: the driver's look
#: comes once a second and the scheduler's answers queue behind the run's messages
SLACK_S = 3.0

FAULTS = {"kill": "left the cluster", "cut": "stopped answering", "stop": "stopped answering"}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_a_lost_worker_of_any_kind_is_said_once_and_the_run_goes_on(host_cluster, kind, fault):
    result = host_cluster.drive(
        fdg="five kinds", fault=fault, target=kind, at=AT, iterations=ITERATIONS, lost_after=LOST_AFTER
    )
    worker = result["fault"]["worker"]
    assert worker == "w2" and result["fault"]["placement"][kind] == ["w2"], result["fault"]
    assert result["rc"] == 0 and result["status"] == "finished", result
    assert result["iterations"] == list(range(ITERATIONS)), result  # every iteration, once, in order

    printed = [line for line in result["stdout"].splitlines() if line.startswith(f"workbench: worker {worker} ")]
    assert len(printed) == 1, result["stdout"]
    line = printed[0][len("workbench: ") :]
    assert result["events"] == [line], result  # the line is the run's event, word for word
    assert line.startswith(f"worker {worker} {FAULTS[fault]} mid-run"), line
    # what it held, and where it went: w1, or — a killed process's nanny starts a new one
    # under the same name — that worker again, once it has joined
    moved = [f"re-placed {kind} {worker} → w1"]
    if fault == "kill":
        moved.append(f"re-placed {kind} back on {worker} (restarted under the same name)")
    assert any(m in line for m in moved), line
    redone = re.search(r"(\d+|no) finished iterations? run again \(continuing from iteration (\d+)\)$", line)
    assert redone, line
    assert int(redone.group(1).replace("no", "0")) == result["lost_iterations"] <= 1, (line, result)
    # the learner went on from its snapshot: every iteration halved its scale exactly once
    assert result["scale"] == 0.5**ITERATIONS, result
    assert "w1" in result["placed_on"] and set(result["placed_on"]) <= {"w1", worker}, result
    if fault != "kill":  # decided by workbench, within the bound, not by Dask's timeouts
        assert result["silent_seconds"] and result["silent_seconds"][0] <= LOST_AFTER + SLACK_S, line
        assert result["detected_after"] <= LOST_AFTER + 2 * SLACK_S, result
