"""Changing a training run from a real Jupyter kernel, as a notebook does it.

The quickstart's cells run in an ipykernel (``jupyter_client``, as JupyterLab talks to
it); a background ``%fdg run`` trains, then

* the learner cell is re-run with an extra ``wb.log("edited", 1.0)``: the cell says at
  once from which iteration it applies, and the metric appears from the iteration the
  edit landed at, never before;
* ``cfg.learning_rate = 1e-3`` and ``%fdg update cfg``: the logged
  ``charts/learning_rate`` changes from the iteration the update landed at;
* through both, the learner keeps its state: the annealed learning rate goes on from its
  update counter (``lr = (1 - i / cfg.iterations) · cfg.learning_rate`` at iteration i),
  and every iteration has its losses.

Both under ``inline`` (in the kernel's process) and ``coarse`` (the embedded cluster the
kernel starts, as a notebook does). Small iterations: nothing here depends on learning.
"""

from __future__ import annotations

import math

import pytest

from .kernel import applies_from, learner_cell, quickstart_cells

#: small and quick on 2 busy cores
SMALL = "cfg.num_envs = 4\ncfg.num_steps = 16\ncfg.iterations = 100_000"
#: the run is stopped by the test, never by its end: a fast machine must not finish it (or
#: reach the learning-rate annealing's horizon, cfg.iterations) before the changes land
ITERATIONS = 100_000
OLD_LR, NEW_LR = 3e-3, 1e-3
#: iterations past a landing to see before the next change (the metrics rows behind it)
PAST = 3


#: iterations the running run has finished (0 before it has a record: the last run's is not it)
ROWS = "(len(fdg.last_run.rows) if fdg.running and fdg.last_run.status == 'running' else 0)"


def _landed(events: list, kind: str) -> int:
    found = [e for e in events if e["kind"] == kind]
    assert len(found) == 1, events
    return found[0]["iteration"]


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_edit_and_update_a_background_run_from_a_real_kernel(kernel, policy):
    kernel.ok("%fdg reset")
    for cell in quickstart_cells():
        kernel.ok(cell)
    kernel.ok(SMALL + "\nfdg = %fdg")
    started = kernel.ok(f"%fdg run --background --policy {policy} --iterations {ITERATIONS} --steps 16", timeout=600)
    assert "training in the background" in started.stdout, started.text
    kernel.wait_for(f"{ROWS} >= 3", "the first 3 iterations", timeout=300)

    # re-run the learner cell with one more metric
    edit = kernel.ok(learner_cell().rstrip("\n") + '\nwb.log("edited", 1.0)\n')
    assert edit.stderr == "", edit.stderr
    edit_from = applies_from(edit.stdout, "learner: new iteration cell")
    kernel.wait_for(
        f"any(e.kind == 'edited' for e in fdg.last_run.events) and {ROWS} >= "
        f"max(e.iteration for e in fdg.last_run.events if e.kind == 'edited') + {PAST}",
        "the edit's landing",
        timeout=300,
    )

    # change the learning rate the documented way
    update = kernel.ok(f"cfg.learning_rate = {NEW_LR}\n%fdg update cfg")
    assert update.stderr == "", update.stderr
    update_from = applies_from(update.stdout, "new value of cfg")
    kernel.wait_for(
        f"any(e.kind == 'updated' for e in fdg.last_run.events) and {ROWS} >= "
        f"max(e.iteration for e in fdg.last_run.events if e.kind == 'updated') + {PAST}",
        "the update's landing",
        timeout=300,
    )

    stop = kernel.ok("run = %fdg stop\nprint('STATUS', run.status)", timeout=300)
    assert "STATUS stopped" in stop.stdout, stop.text
    record = kernel.value(
        "{'events': [{'kind': e.kind, 'iteration': e.iteration} for e in run.events],"
        " 'iteration': list(run.metrics.index),"
        " 'edited': [None if v != v else v for v in run.metrics['edited']],"
        " 'lr': list(run.metrics['charts/learning_rate']),"
        " 'loss': list(run.metrics['losses/value_loss']),"
        " 'horizon': cfg.iterations}"
    )
    iterations = record["iteration"]
    assert iterations == list(range(len(iterations))), "every iteration recorded once, in order"

    # the edit: said at once, landed no earlier than said, exact from its landing on
    edited = _landed(record["events"], "edited")
    assert edit_from <= edited < len(iterations) - PAST + 1
    assert all(v is None for v in record["edited"][:edited]), record["edited"]
    assert all(v == 1.0 for v in record["edited"][edited:]), record["edited"]

    # the update: the learning rate the cells log changes at its landing iteration
    updated = _landed(record["events"], "updated")
    assert edited < update_from <= updated < len(iterations)
    base = [lr / (1 - i / record["horizon"]) for i, lr in zip(iterations, record["lr"])]
    want = [OLD_LR if i < updated else NEW_LR for i in iterations]
    wrong = [(i, b) for i, b, w in zip(iterations, base, want) if not math.isclose(b, w, rel_tol=1e-6)]
    assert not wrong, f"(iteration, learning rate / annealing factor) not as set, landed at {updated}: {wrong}"
    # … and the learner kept learning through both: its update counter went on (the
    # annealing above never restarted) and every iteration ran the PPO update
    assert all(math.isfinite(v) for v in record["loss"]), record["loss"]
