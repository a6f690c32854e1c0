"""A worker whose channel servers answer late is busy, not lost (issue 30: under
SingleLearnerCoarse(actors=100) on 2 cores, liveness retired a healthy worker): the
liveness decision retires only workers the scheduler has not heard from for a while, whose
channels then miss a probe, AND whose nanny does not see them compute: a worker starved of
the CPU can miss its heartbeats for longer than any fixed patience (it did once in CI,
silent 19 s), but its process runs and uses CPU; a frozen one is stopped. And the same run
leaked a ``FutureCancelledError`` traceback: a loop's done callback read the result of a
future cancelled after it finished (``workbench.cluster.backend.loop_ended``)."""

from __future__ import annotations

import time

from workbench.cluster import liveness
from workbench.cluster._dask_compat import workers_info

UNANSWERED = ("127.0.0.1", 1)  # nothing listens there: a probe gets no challenge
BOUND = liveness.LossBound(5.0)


def test_the_decision_is_pure_suspects_then_what_the_probe_and_the_nanny_say():
    S, U, A = liveness.SILENT, liveness.UNREACHABLE, liveness.ANSWERED
    assert liveness.suspects({"w1": 0.5, "w2": 2.0, "w3": None}, BOUND) == ["w2", "w3"]
    assert liveness.suspects({"w1": 1.99}, BOUND) == []
    unheard = dict.fromkeys(["answers", "computes", "frozen", "gone", "cut", "idle", "late nanny"], 2.5)
    probes = {"answers": A, "computes": S, "frozen": S, "gone": S, "cut": U, "idle": S, "late nanny": S}
    processes = {
        "answers": "idle",
        "computes": "computing",
        "frozen": "stopped",
        "gone": "gone",
        "cut": U,
        "idle": "idle",
        "late nanny": U,
    }
    assert liveness.judged_lost(sorted(unheard), probes, processes, unheard, BOUND) == ["cut", "frozen", "gone"]
    # a process its host answers for, neither answering nor computing: lost once unheard the whole bound
    unheard = {**unheard, "idle": BOUND.seconds, "late nanny": BOUND.seconds + 1}
    assert liveness.judged_lost(["idle", "late nanny"], probes, processes, unheard, BOUND) == ["idle", "late nanny"]
    # the whole quick decision comes within the bound: suspected, then probe and nanny at once
    bound = liveness.LossBound(10.0)
    assert bound.suspect_after + max(bound.probe_timeout, bound.nanny_timeout) < bound.seconds


def test_a_probe_says_silent_where_the_host_takes_or_refuses_the_connection():
    import socket

    with socket.socket() as listening:  # a host that takes the connection, a process that says nothing
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert liveness.probe(listening.getsockname(), timeout=0.3) == liveness.SILENT
    assert liveness.probe(UNANSWERED, timeout=0.3) == liveness.SILENT  # refused: the host is there
    # a host that answers nothing (its link down) is tests/hosts/test_fault_matrix.py's


def test_every_worker_is_heard_from_within_a_second(client):
    unheard = liveness.unheard_for(client, timeout=5.0)
    assert set(unheard) == set(workers_info(client)) and all(0 <= s < 2.0 for s in unheard.values()), unheard


def test_a_live_worker_whose_channels_do_not_answer_is_not_lost(client):
    live = sorted(workers_info(client))[0]
    assert liveness.unanswered({live: UNANSWERED}, timeout=0.5) == [live]  # the probe alone would retire it
    assert liveness.lost_among(client, {live: UNANSWERED}, {live: 3.0}, BOUND) == []  # its host answers
    assert live in workers_info(client)


def _spin(seconds: float) -> int:
    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += 1
    return n


def test_a_silent_worker_is_lost_unless_its_nanny_sees_it_compute(client):
    gone = "tcp://127.0.0.1:9"  # not a worker of this cluster: no nanny to vouch for it
    live = sorted(workers_info(client))[0]
    assert liveness.lost_among(client, {gone: UNANSWERED, live: UNANSWERED}, {gone: None, live: 3.0}, BOUND) == [gone]
    # one whose channels do not answer (as a worker starved of the CPU for seconds), but
    # computing: its nanny sees the process run and its CPU time grow, so it is busy, not lost
    spinning = client.submit(_spin, 15.0, workers=[live], pure=False)  # (a running task cannot be cancelled: short)
    deadline = time.monotonic() + 12
    while live not in liveness.computing(client, [live]):
        assert time.monotonic() < deadline, "the spinning worker never showed CPU time"
    assert liveness.lost_among(client, {live: UNANSWERED}, {live: BOUND.seconds + 1}, BOUND) == []
    assert liveness.computing(client, [gone]) == []
    client.cancel(spinning)


def test_a_frozen_worker_is_lost_by_its_nannys_word_and_unheard(client):
    import os
    import signal

    address = sorted(workers_info(client))[1]
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(BOUND.suspect_after + 0.5)
        assert liveness.unheard_for(client, timeout=5.0)[address] >= BOUND.suspect_after
        assert liveness.computing(client, [address]) == []
        assert liveness.process_states(client, [address])[address] == "stopped"
        assert liveness.lost_among(client, {address: UNANSWERED}, {address: 3.0}, BOUND) == [address]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert address in workers_info(client)  # lost_among decides; retiring is the caller's


def test_reading_progress_from_a_worker_whose_event_loop_does_not_answer_times_out(client):
    """The stall detector's read of the replicas' progress must not hold the driver: in a
    stuck CI run it waited in ``client.run`` for minutes."""
    import threading

    worker = sorted(workers_info(client))[0]
    blocker = threading.Thread(target=client.run, args=(time.sleep, 8.0), kwargs={"workers": [worker]})
    blocker.start()  # a sync function run by client.run blocks the worker's event loop
    time.sleep(1.0)
    started = time.monotonic()
    try:
        liveness.loop_activity(client, "no-such-run", {}, [worker], timeout=2.0)
    except Exception as exc:  # a timeout
        assert "time" in type(exc).__name__.lower() or "timed out" in str(exc).lower(), repr(exc)
    else:
        raise AssertionError("the read returned while the worker's event loop was blocked")
    assert time.monotonic() - started < 6.0
    blocker.join()


# -- SingleLearnerCoarse(actors=100) on two single-thread workers, end to end ------------------------
def test_a_hundred_actors_on_two_workers_lose_no_worker_and_leak_no_traceback(client, capfd):
    from tests.conftest import toy_fdg
    from workbench.fdg.policy import SingleLearnerCoarse

    run = toy_fdg().run(iterations=3, steps=4, policy=SingleLearnerCoarse(actors=100), cluster=client, progress=False)
    assert run.status == "finished" and run.completed_iterations == 3, run
    assert run.env_steps == 100 * 3 * 3 * 4  # 3 counters per env replica, 4 steps, 3 iterations
    assert not [e for e in run.events if e.kind == "worker lost"], run.events
    assert len(workers_info(client)) == 2
    err = capfd.readouterr().err  # Dask's log of a done callback that raised, as it leaked
    assert "FutureCancelledError" not in err and "Error in callback" not in err, err


class _Events:
    def __init__(self) -> None:
        self.said: list[tuple] = []

    def error(self, exc) -> None:
        self.said.append(("error", str(exc)))

    def exit(self, group, replica) -> None:
        self.said.append(("exit", group, replica))


class _Future:
    """A loop task's future as a done callback may find it."""

    def __init__(self, status: str, result=None, cancelled_since: bool = False) -> None:
        self.status, self._result, self._cancelled = status, result, cancelled_since

    def result(self):
        if self._cancelled:
            from distributed.client import FutureCancelledError

            raise FutureCancelledError("actor+env-loop-1", reason="unknown")
        return self._result


def test_a_loop_cancelled_after_it_finished_is_an_exit_not_a_traceback():
    from workbench.cluster.backend import PeerLost, loop_ended

    events = _Events()
    loop_ended(events, _Future("finished", cancelled_since=True), ("actor+env", 3))  # raised before
    loop_ended(events, _Future("cancelled"), ("actor+env", 4))
    loop_ended(events, _Future("finished", PeerLost("tcp://10.0.0.2:4000")), ("learner", 0))
    assert events.said == [
        ("exit", "actor+env", 3),
        ("exit", "actor+env", 4),
        ("error", "learner[0] lost a peer: tcp://10.0.0.2:4000"),
        ("exit", "learner", 0),
    ]
