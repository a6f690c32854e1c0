"""A script that runs inline exits cleanly (issue 27 item 6): status 0, and no
``terminate called without an active exception`` on stderr.

That line came from a replica thread left inside torch's native code when the process
exited (after a false stall abandoned PPO's update at 65,536 envs): the thread, coming back
into Python during the interpreter's shutdown, is ended by ``pthread_exit``, whose unwinding
through torch's C++ frames aborts the process. Here both ways to leave such a thread are
run in a fresh process: a long torch update past a (shortened) stall deadline, which must
now finish; and a stop whose grace (shortened) runs out while the update computes, which
abandons its thread — the exit then waits for it (``workbench.runtime.process.exit_guard``). The
update catches every exception: a stop now ends a cell that comes back to Python by raising
into its thread (``workbench.runtime.engine.inline.reclaim``), and one that swallows that is what
is left behind computing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent('''
    import sys, threading, time
    import numpy as np, torch
    import workbench as wb
    import workbench.runtime.engine.driver as driver
    import workbench.runtime.engine.inline as inline

    case = sys.argv[1]
    driver.STALL_TIMEOUT_S = 1.0   # the long update below lasts 3 deadlines
    driver.STOP_GRACE_S = 0.5      # a stop gives up on the update at once: its thread is abandoned
    inline.RECLAIM_WAIT_S = 0.1    # the update survives the exception raised into it: no use waiting
    UPDATE = """
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:                                     # the loop inside: its every return to Python is in the try
            while time.monotonic() - began < seconds:
                (x @ w).tanh().sum().backward()  # inside torch, the GIL released, most of the time
        except BaseException:                    # the stop's exception too: the thread outlives the stop
            pass
    updates += 1
    """
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "time": time, "seconds": 3.0})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("env", "obs = obs + 1\\nreward = np.ones(2)", rate="step")
    fdg.add_fragment("learner", "x = torch.randn(200_000, 64)\\nw = torch.randn(64, 64, requires_grad=True)\\n"
                                "updates = 0", rate="init")
    fdg.add_fragment("learner", UPDATE, rate="iteration")

    def stop_in_the_second_update():
        while fdg.last_run is None or fdg.last_run.completed_iterations < 1:
            time.sleep(0.05)
        time.sleep(0.5)
        fdg.stop()

    if case == "stopped":
        threading.Thread(target=stop_in_the_second_update, daemon=True).start()
    run = fdg.run(iterations=2, steps=2, policy="inline", progress=False)
    print("run:", run.status, run.completed_iterations, flush=True)
''')


@pytest.mark.parametrize("case, status", [("long", "finished 2"), ("stopped", "stopped 1")])
def test_a_script_that_runs_inline_exits_cleanly(case, status, tmp_path):
    script = tmp_path / "run_inline.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, timeout=300)
    assert "terminate called" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    assert f"run: {status}" in done.stdout
    if case == "stopped":  # the abandoned update was still computing: the exit waited for it
        assert "has not returned" in done.stdout and "waiting for the learner iteration cell" in done.stderr
        assert "cannot be stopped" in done.stdout  # the stop said so, with what to do
