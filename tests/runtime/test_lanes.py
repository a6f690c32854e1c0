"""Lanes (``lanes=True``): an acting group's co-located replicas stepped in one thread.

What is checked: the lanes really interleave at the env's hand-off (one replica's cells
run while the other's envs step in a thread of their own), a run gives the same numbers
with and without lanes (each replica keeps its own random streams, in one process and on
a worker), a failing or stopped replica leaves its lane siblings free (no hang), a step
cell that would wait for another lane of its thread gets a clear error, and the option's
own checks. EnvPool's env with a continuous PPO is checked in tests/envs/test_envpool_lanes.py.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.errors import FragmentRuntimeError, RunConfigError
from workbench.fdg.policy import Group, Policy
from workbench.fdg.vocabulary import IN_PROCESS

pytest.importorskip("greenlet")

SEED, ACTORS, ITERATIONS, STEPS = 7, 2, 3, 5


class Trace(list):
    """What the replicas did, in order: one list for every replica of the process (a run
    copies the notebook's values for itself; this one it shares, as a copy returns it)."""

    def __deepcopy__(self, memo) -> "Trace":
        return self


class HandOffEnv:
    """Envs stepped by a thread of their own (as EnvPool's C++ threads, a simulator behind
    a socket): ``step`` hands the actions over, lets another lane act meanwhile
    (``wb.step_elsewhere``), then waits for the result. ``trace`` records who did what."""

    def __init__(self, num_envs: int, index: int, trace: list) -> None:
        self.num_envs, self.index, self.trace = num_envs, index, trace
        self.state = np.zeros(num_envs)
        self.pool = ThreadPoolExecutor(1)
        self.threads: set[int] = set()  # the threads its replica's steps ran in

    def _advance(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(0.002)  # the simulator's time: another lane can act in it
        self.state = self.state + action
        return self.state.copy(), np.ones(self.num_envs)

    def step(self, action: np.ndarray):
        self.threads.add(threading.get_ident())
        pending = self.pool.submit(self._advance, np.asarray(action, dtype=float))
        self.trace.append(("sent", self.index))
        wb.step_elsewhere()
        return pending.result()


def handoff_fdg(trace: list, lanes_cell: str = "") -> wb.FDG:
    """An actor+env group whose actor draws from torch and NumPy (seeded per replica) and
    whose env hands its steps to a thread; the learner keeps what it received."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb, "HandOffEnv": HandOffEnv, "trace": trace, "SEED": SEED})
    fdg.add_fragment("env", "envs = HandOffEnv(2, replica.index, trace)\nobs = np.zeros(2)", rate="init")
    fdg.add_fragment(
        "actor", "torch.manual_seed(SEED + replica.index)\nnp.random.seed(SEED + replica.index)", rate="init"
    )
    fdg.add_fragment(
        "actor",
        (
            "trace.append(('act', replica.index))\n"
            "draws = np.array([[float(torch.rand(())), float(np.random.rand())]])\n"
            "action = obs * 0 + draws[0, 0]\n" + lanes_cell
        ),
        rate="step",
    )
    fdg.add_fragment("env", "obs, reward = envs.step(action)\nran_in = sorted(envs.threads)", rate="step")
    fdg.add_fragment("learner", "seen = []", rate="init")
    fdg.add_fragment("learner", "seen.append((draws.copy(), obs.copy()))", rate="iteration")
    return fdg


def in_one_process(fdg: wb.FDG) -> Policy:
    acting = fdg.schedule().step_order
    rest = tuple(n for n in fdg.fragments if n not in acting)
    return Policy(
        "actors in one process", (Group(acting, ACTORS, (IN_PROCESS,) * ACTORS), Group(rest, 1, (IN_PROCESS,)))
    )


def seen(run) -> list:
    return [(d.tolist(), o.tolist()) for d, o in run.state.fragments["learner"][0]["seen"]]


def test_lanes_interleave_at_the_hand_off_and_change_no_number():
    with_lanes, without = Trace(), Trace()
    runs = {}
    for lanes, trace in ((True, with_lanes), (False, without)):
        fdg = handoff_fdg(trace)
        runs[lanes] = fdg.run(
            iterations=ITERATIONS, steps=STEPS, policy=in_one_process(fdg), lanes=lanes, keep_state=True, progress=False
        )
        assert runs[lanes].status == "finished", runs[lanes].error
    assert seen(runs[True]) == seen(runs[False])  # each replica drew its own streams either way
    assert runs[True].env_steps == runs[False].env_steps == ITERATIONS * STEPS * 2 * ACTORS
    # in one thread: a replica's env hands its step over, and the other replica acts then,
    # every step of every iteration: act 0, sent 0, act 1, sent 1, act 0, …
    expected = [(what, k) for _ in range(ITERATIONS * STEPS) for k in range(ACTORS) for what in ("act", "sent")]
    assert with_lanes == expected


def test_a_failing_replica_does_not_hold_its_lane_siblings():
    trace = Trace()
    fdg = handoff_fdg(trace, "if replica.index == 1 and len(trace) > 12:\n    raise ValueError('replica 1 broke')\n")
    started = time.monotonic()
    with pytest.raises(FragmentRuntimeError, match="replica 1 broke") as raised:
        fdg.run(iterations=ITERATIONS, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
    assert raised.value.replica == 1 and time.monotonic() - started < 60
    assert len(fdg.fragments) == 3  # the FDG is intact


def test_a_replica_failing_before_its_steps_does_not_hold_the_other_at_the_meeting():
    trace = Trace()
    fdg = handoff_fdg(trace)
    fdg.add_fragment("actor", "if replica.index == 0:\n    raise RuntimeError('no steps for me')", rate="iteration")
    started = time.monotonic()
    with pytest.raises(FragmentRuntimeError, match="no steps for me"):
        fdg.run(iterations=ITERATIONS, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
    assert time.monotonic() - started < 60


def test_a_stop_while_lanes_step_ends_the_run():
    trace = Trace()
    fdg = handoff_fdg(trace)
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "run", fdg.run(iterations=10_000, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
        )
    )
    thread.start()
    deadline = time.monotonic() + 60
    while len(trace) < 60 and time.monotonic() < deadline:  # two iterations and more
        time.sleep(0.01)
    fdg.stop()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert result["run"].status == "stopped" and 0 < result["run"].completed_iterations < 10_000


def test_allreduce_inside_a_lane_step_cell_says_why_it_cannot():
    trace = Trace()
    fdg = handoff_fdg(trace, "total = wb.allreduce(torch.ones(1))\n")
    with pytest.raises(FragmentRuntimeError) as raised:
        fdg.run(iterations=1, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
    text = str(raised.value)
    assert "wb.allreduce" in text and "lanes=False" in text and "same thread" in text
    assert raised.value.fragment == "actor" and raised.value.rate == "step"


def test_lanes_on_a_cluster_give_what_threads_give(client):
    """Two actor replicas on each of two workers (SingleLearnerCoarse(actors=4)): lanes on
    each worker, the same numbers as without."""
    got, threads = {}, {}
    for lanes in (True, False):
        trace = Trace()
        run = handoff_fdg(trace).run(
            iterations=ITERATIONS,
            steps=STEPS,
            policy=wb.SingleLearnerCoarse(actors=4),
            cluster=client,
            lanes=lanes,
            keep_state=True,
            progress=False,
        )
        assert run.status == "finished", run.error
        got[lanes] = seen(run)
        threads[lanes] = [state["ran_in"] for state in run.state.fragments["env"]]
    assert got[True] == got[False]
    # replicas 0 and 2 share a worker, 1 and 3 the other: with lanes each pair stepped in one thread
    assert threads[True][0] == threads[True][2] and threads[True][1] == threads[True][3]
    assert threads[False][0] != threads[False][2]


def test_lanes_is_a_flag_of_every_surface_and_needs_greenlet(monkeypatch):
    from workbench.cli import _parser
    from workbench.config import RunConfig, parse_run_line

    assert RunConfig(lanes=True).lanes and not RunConfig().lanes
    assert parse_run_line("--lanes")["lanes"] is True  # %fdg run --lanes
    assert _parser().parse_args(["run", "nb.ipynb", "--lanes"]).lanes is True  # workbench run --lanes
    with pytest.raises(RunConfigError, match="lanes must be True or False"):
        RunConfig(lanes="yes")
    monkeypatch.setitem(sys.modules, "greenlet", None)  # as if it were not installed
    with pytest.raises(RunConfigError, match="pip install greenlet"):
        RunConfig(lanes=True)


def test_a_stuck_lane_and_a_stop_return_and_name_the_cell(tmp_path, capsys):
    """One lane's cell never returns (its thread drives the other lane too): a stop still
    returns, names the stuck cell, and the next run works."""
    release, marker = tmp_path / "release", tmp_path / "stuck"
    trace = Trace()
    fdg = handoff_fdg(
        trace,
        (
            "if replica.index == 1 and len(trace) > 20:\n"
            "    open(MARKER, 'a').close()\n"
            "    while not os.path.exists(RELEASE):\n"
            "        time.sleep(0.05)\n"
        ),
    )
    fdg.namespace.update(os=__import__("os"), time=time, MARKER=str(marker), RELEASE=str(release))
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "run", fdg.run(iterations=50, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
        )
    )
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists()
        fdg.stop()
        thread.join(timeout=120)
        assert not thread.is_alive()
        run = result["run"]
        assert run.status == "stopped"
        said = capsys.readouterr().out + capsys.readouterr().err
        # the stuck cell, and the other replica's, which waits in its lane behind it
        assert "the actor step cell (replica 1 of actor+env" in said
        assert "replica 0 of actor+env, on local) has not returned" in said
        assert "waits for its turn in its lane" in said
    finally:
        release.write_text("")
    fdg.namespace["MARKER"] = str(tmp_path / "never")
    again = fdg.run(iterations=1, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
    assert again.status == "finished"


def test_groups_that_receive_every_step_are_not_lanes_and_still_run():
    """SingleLearnerFine's shape in one process: the actor and the env as groups of two
    replicas each, handing values to each other every step. Lanes of such a group could
    wait on each other through the other group, so they keep their threads: the run
    finishes, each env replica stepped in a thread of its own, and the run says lanes were
    not applied."""
    trace = Trace()
    fdg = handoff_fdg(trace)
    policy = Policy(
        "actor and env apart, one process",
        (
            Group(("actor",), ACTORS, (IN_PROCESS,) * ACTORS),
            Group(("env",), ACTORS, (IN_PROCESS,) * ACTORS),
            Group(("learner",), 1, (IN_PROCESS,)),
        ),
    )
    run = fdg.run(iterations=ITERATIONS, steps=STEPS, policy=policy, lanes=True, keep_state=True, progress=False)
    assert run.status == "finished", run.error
    assert run.env_steps == ITERATIONS * STEPS * 2 * ACTORS
    threads = [state["ran_in"] for state in run.state.fragments["env"]]
    assert len(threads[0]) == len(threads[1]) == 1 and threads[0] != threads[1]
    assert [e for e in run.events if e.kind == "not applied" and "lanes=True" in e.message]


def test_lanes_that_the_placement_gives_nothing_to_say_so():
    trace = Trace()
    fdg = handoff_fdg(trace)
    alone = fdg.run(iterations=1, steps=STEPS, policy="inline", lanes=True, progress=False)
    assert alone.status == "finished"
    said = [e.message for e in alone.events if e.kind == "not applied"]
    assert said and "no group that steps on its own" in said[0] and "IN_PROCESS, IN_PROCESS" in said[0]
    paired = fdg.run(iterations=1, steps=STEPS, policy=in_one_process(fdg), lanes=True, progress=False)
    assert not [e for e in paired.events if e.kind == "not applied"]
