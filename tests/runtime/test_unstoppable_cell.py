"""A stop of an inline run whose cell never returns (issue 55 item 4a).

Inline, a replica is a thread of this process, and Python cannot kill a thread. Before,
such a stop said the thread "finishes on its own" — a ``while True: pass`` never does —
and it spun in the kernel for good: a later 300-iteration run took 0.57 s instead of
0.10 s, with nothing saying why. Now the stop raises an exception into the thread
(``workbench.runtime.engine.inline.reclaim``): a pure-Python loop ends there, and the stop says
so. A thread blocked outside Python (here on an Event, as a native call would) survives
it: the stop says it cannot be stopped, what that costs and what to do, and every later
run in the process says so at its start (a ``cell left running`` event) until the thread
ends. The grace is shortened (``STOP_GRACE_S``, a mechanism's parameter); wall-clock
bounds are hang guards only.
"""

from __future__ import annotations

import queue
import threading

import pytest

import workbench as wb
import workbench.runtime.engine.driver
import workbench.runtime.engine.inline
from workbench.runtime.process import exit_guard
from workbench.runtime.engine.inline import left_running_notice, reclaim

#: the env's step cell: once ``trap`` is set, it hands the test its thread and gets stuck
#: in ``STUCK`` (line 4 of the cell)
STEP = """\
obs = obs + 1
if trap.is_set():
    trap.clear(); threads.put(threading.current_thread()); stuck.set()
    {stuck}
"""
SPINS = "while True: pass"  # pure Python: reclaimable
BLOCKS = "gate.wait()"  # blocked outside Python: an exception raised into it waits for the call
ADVICE = 'Restart the kernel to end it, or run cells that may not return under a cluster policy (policy="coarse")'


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(workbench.runtime.engine.driver, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(workbench.runtime.engine.inline, "RECLAIM_WAIT_S", 0.5)


@pytest.fixture
def gate():
    """What a blocked cell waits for; opened when the test ends, so no thread outlives it."""
    gate = threading.Event()
    yield gate
    gate.set()
    for thread, _ in exit_guard.abandoned():
        thread.join(timeout=10)


def trapped_fdg(stuck_line: str, gate: threading.Event) -> tuple[wb.FDG, dict]:
    """An FDG whose env step cell gets stuck on ``stuck_line`` once armed; and the events
    and the queue (values no deploy copies: shared with the cells) that drive it."""
    shared = {"trap": threading.Event(), "stuck": threading.Event(), "threads": queue.Queue(), "gate": gate}
    fdg = wb.FDG(namespace={"threading": threading, **shared})
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("env", STEP.format(stuck=stuck_line), rate="step")
    fdg.add_fragment("learner", "total = 0", rate="init")
    fdg.add_fragment("learner", "total += obs", rate="iteration")
    return fdg, shared


def stop_a_stuck_run(fdg: wb.FDG, shared: dict) -> tuple[wb.Run, threading.Thread]:
    """Run until the step cell is stuck, stop (as ``%fdg stop`` does); the run and the
    stuck cell's thread."""
    shared["trap"].set()

    def stop_once_stuck() -> None:
        if shared["stuck"].wait(timeout=60):
            fdg.stop()

    threading.Thread(target=stop_once_stuck, daemon=True).start()
    run = fdg.run(iterations=10_000, steps=3, policy="inline", progress=False)
    return run, shared["threads"].get(timeout=1)


def left_running_events(run: wb.Run) -> list[str]:
    return [e.message for e in run.events if e.kind == "cell left running"]


def test_a_stop_ends_a_cell_that_spins_forever_and_later_runs_are_not_told_of_it(gate, capsys):
    fdg, shared = trapped_fdg(SPINS, gate)
    run, spinning = stop_a_stuck_run(fdg, shared)
    said = capsys.readouterr().out
    assert run.status == "stopped"
    assert "the env step cell (replica 0 of env" in said and "at cell line 4: `while True: pass`" in said
    assert "workbench ended its thread as the run stopped" in said and "cannot be stopped" not in said
    assert not spinning.is_alive() and spinning not in threading.enumerate()
    assert left_running_notice() is None

    again = fdg.run(iterations=30, steps=3, policy="inline", progress=False)
    assert again.status == "finished" and left_running_events(again) == []
    assert "still runs in this kernel" not in capsys.readouterr().out


def test_a_cell_blocked_outside_python_is_said_to_be_unstoppable_and_later_runs_say_so_until_it_returns(gate, capsys):
    fdg, shared = trapped_fdg(BLOCKS, gate)
    run, blocked = stop_a_stuck_run(fdg, shared)
    said = capsys.readouterr().out
    assert run.status == "stopped"
    # the stop: which cell, where, that it cannot be stopped, what it costs, what to do
    assert "the env step cell (replica 0 of env" in said and "at cell line 4: `gate.wait()`" in said
    assert "cannot be stopped" in said and "keeps running in this kernel" in said
    assert "taking CPU from every later run here" in said and ADVICE in said
    assert blocked.is_alive() and blocked in [t for t, _ in exit_guard.abandoned()]

    # a later run says so at its start, printed and in run.events (the live view and report list them)
    later = fdg.run(iterations=30, steps=3, policy="inline", progress=False)
    assert later.status == "finished"
    [notice] = left_running_events(later)
    assert "the env step cell (replica 0 of env" in notice and "at cell line 4: `gate.wait()`" in notice
    assert "takes CPU from this run" in notice and ADVICE in notice
    assert notice in capsys.readouterr().out

    # the call returns: the exception raised into the thread at the stop ends it there
    gate.set()
    blocked.join(timeout=10)
    assert not blocked.is_alive() and left_running_notice() is None
    after = fdg.run(iterations=30, steps=3, policy="inline", progress=False)
    assert after.status == "finished" and left_running_events(after) == []


def test_reclaim_ends_a_pure_python_loop_and_reports_a_blocked_thread_that_ends_when_its_call_returns(gate):
    spinning = threading.Event()

    def spin() -> None:
        spinning.set()
        while True:
            pass

    errors = []
    previous_hook, threading.excepthook = threading.excepthook, errors.append
    try:
        spinner = threading.Thread(target=spin, daemon=True)
        blocked = threading.Thread(target=gate.wait, daemon=True)
        spinner.start(), blocked.start()
        assert spinning.wait(timeout=10)
        assert reclaim([spinner, blocked], wait=0.5) == [blocked]
        assert not spinner.is_alive() and spinner not in threading.enumerate()
        gate.set()  # its call returns, and it ends right there
        blocked.join(timeout=10)
        assert not blocked.is_alive()
    finally:
        threading.excepthook = previous_hook
    # raised into bare threads (no replica loop to catch it): each ended with ThreadReclaimed
    assert sorted(type(e.exc_value).__name__ for e in errors) == ["ThreadReclaimed", "ThreadReclaimed"]
