"""An FDG without step cells runs one task per iteration: it reports each iteration as it
ends, so a run longer than the driver's window of iterations ahead goes on (it was one task
for the whole run, whose first report came at its end: past the window, it waited forever)."""

from __future__ import annotations

import time

import workbench as wb
from workbench.runtime.engine.driver import LOOKAHEAD


def test_a_learner_alone_reports_every_iteration_past_the_window():
    fdg = wb.FDG(namespace={"time": time, "wb": wb})
    fdg.add_fragment("learner", "level = 0.0\nseen = []", rate="init")
    fdg.add_fragment("learner", "time.sleep(0.01)\nlevel += 1\nwb.log('level', level)", rate="iteration")
    arrived = []
    run = fdg.run(
        iterations=LOOKAHEAD + 4,
        steps=1,
        progress=False,
        run_store="off",
        loggers=(
            type("Rows", (), {"log": lambda self, row: arrived.append(row["iteration"]), "close": lambda self: None})(),
        ),
    )
    assert run.status == "finished"
    assert [row["level"] for row in run.rows] == [float(i + 1) for i in range(LOOKAHEAD + 4)]
    assert arrived == list(range(LOOKAHEAD + 4))  # one row each, as each iteration ended
