"""Each replica draws from its own random streams (torch, NumPy's global, Python's
``random``), whichever replicas share its process: the same seed gives the same numbers
on every run and under every placement (DESIGN.md, contract 1).

The oracle is computed here, not by the runtime: replica k seeded with ``SEED + k`` draws
exactly what a fresh generator seeded with ``SEED + k`` draws, step after step.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.fdg.policy import Group, Policy
from workbench.fdg.vocabulary import IN_PROCESS
from workbench.runtime.transport.channels import Stopped
from workbench.runtime.state.randomness import PATIENCE_S, GeneratorTurns

SEED, ACTORS, ITERATIONS, STEPS = 100, 4, 2, 3


def expected_draws(seed: int, n: int) -> list[tuple[float, float, float]]:
    """What a replica seeded with ``seed`` draws in ``n`` steps, one of each kind per step."""
    torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
    return [(float(torch.rand(())), float(np.random.rand()), random.random()) for _ in range(n)]


# ------------------------------------------------------------------ the turns themselves
def test_each_replica_draws_its_own_streams_however_threads_interleave():
    turns, threads, got = GeneratorTurns(), [], {}

    def replica(k: int) -> None:
        streams, mine = turns.streams(), []
        with turns.turn(streams, stopped=lambda: False):
            torch.manual_seed(SEED + k), np.random.seed(SEED + k), random.seed(SEED + k)
        for _ in range(20):
            with turns.turn(streams, stopped=lambda: False):
                mine.append((float(torch.rand(())), float(np.random.rand()), random.random()))
            time.sleep(0.001 * (k % 2))  # vary the interleaving
        got[k] = mine

    for k in range(3):
        threads.append(threading.Thread(target=replica, args=(k,)))
        threads[-1].start()
    for thread in threads:
        thread.join(30)
    assert got == {k: expected_draws(SEED + k, 20) for k in range(3)}


def test_numpy_state_is_copied_only_when_a_draw_changed_it(monkeypatch):
    """Swapping NumPy's global state costs ~70 µs a swap (Fine swaps twice a step in the
    learner's process): a swap compares the state in place first and copies only after a
    draw. The draws stay each replica's own (the test above)."""
    turns = GeneratorTurns()
    mine, theirs = turns.streams(), turns.streams()
    calls = []
    real_get, real_set = np.random.get_state, np.random.set_state
    monkeypatch.setattr(np.random, "get_state", lambda *a, **k: calls.append("get") or real_get(*a, **k))
    monkeypatch.setattr(np.random, "set_state", lambda *a, **k: calls.append("set") or real_set(*a, **k))
    for _ in range(10):  # turns that draw from torch and random, never from NumPy
        with turns.turn(mine, stopped=lambda: False):
            float(torch.rand(()))
        with turns.turn(theirs, stopped=lambda: False):
            random.random()
    assert calls == []
    with turns.turn(mine, stopped=lambda: False):
        drawn = np.random.rand()
    with turns.turn(theirs, stopped=lambda: False):  # mine drew: its state is copied, theirs put back
        again = np.random.rand()
    assert calls == ["get", "set"] and again == drawn  # both replicas started from the same state


def test_python_random_state_is_copied_only_when_a_draw_changed_it(monkeypatch):
    """The same for Python's ``random`` (~11 µs a swap to read and write): compared in place,
    copied only after a draw, a seed or a ``setstate`` changed it, including the cached
    second Gaussian of ``random.gauss``, which is state too."""
    turns = GeneratorTurns()
    mine, theirs = turns.streams(), turns.streams()
    calls = []
    real_get, real_set = random.getstate, random.setstate
    monkeypatch.setattr(random, "getstate", lambda: calls.append("get") or real_get())
    monkeypatch.setattr(random, "setstate", lambda state: calls.append("set") or real_set(state))
    for _ in range(10):  # turns that draw from torch and NumPy, never from random
        with turns.turn(mine, stopped=lambda: False):
            float(torch.rand(()))
        with turns.turn(theirs, stopped=lambda: False):
            np.random.rand()
    assert calls == []
    with turns.turn(mine, stopped=lambda: False):
        drawn = random.random()
    with turns.turn(theirs, stopped=lambda: False):  # mine drew: its state is copied, theirs put back
        again = random.random()
    assert calls == ["get", "set"] and again == drawn
    # Both from one state, each its first Gaussian: the words are then alike and only the
    # cached second tells the two apart once mine has used its cache
    one, two = turns.streams(), turns.streams()
    gaussians = {id(one): [], id(two): []}
    for streams in (one, two, one, two):
        with turns.turn(streams, stopped=lambda: False):
            gaussians[id(streams)].append(random.gauss(0.0, 1.0))
    replay = random.Random()
    replay.setstate(turns.streams().python)
    alone = [replay.gauss(0.0, 1.0), replay.gauss(0.0, 1.0)]
    assert gaussians[id(one)] == alone and gaussians[id(two)] == alone


def test_the_in_place_python_fingerprint_reads_what_getstate_gives():
    from workbench.runtime.state.randomness import python_fingerprint

    random.seed(7)
    before = python_fingerprint()
    assert before is not None  # CPython here: the in-place read is in use
    assert python_fingerprint() == before
    random.random()
    assert python_fingerprint() != before
    state = random.getstate()
    random.seed(8)
    random.setstate(state)
    assert python_fingerprint() == python_fingerprint()
    random.gauss(0.0, 1.0)  # the first of a pair: the generator moves and the cache fills
    cached = python_fingerprint()
    random.gauss(0.0, 1.0)  # the cached second: the words stay, the cache empties
    assert python_fingerprint()[0] == cached[0] and python_fingerprint() != cached


def test_saved_states_are_plain_arrays_a_torch_free_process_reads_and_torch_resumes_from():
    """A run's states reach the notebook (export, checkpoints) as NumPy and Python values: a
    notebook whose FDG never uses torch reads them without importing torch (~2.5 s at the
    end of every cluster run before), and torch's generator is put back exactly from them."""
    import pickle
    import subprocess

    from workbench.runtime.state.randomness import Streams

    torch.manual_seed(7)
    saved = Streams()
    saved.save()
    ahead = torch.rand(3)
    states = saved.states()
    assert isinstance(states["torch"], np.ndarray) and states["torch"].dtype == np.uint8
    reader = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", reader], input=pickle.dumps(states), capture_output=True, timeout=60, check=True
    )
    assert done.stdout.strip() == b"False", done.stderr.decode()[-2000:]

    torch.manual_seed(8)  # elsewhere in the stream
    again = Streams()
    again.load(pickle.loads(pickle.dumps(states)))
    again.install()
    assert torch.equal(torch.rand(3), ahead)


def test_a_replica_waiting_for_its_turn_sees_the_stop():
    turns, stop = GeneratorTurns(), threading.Event()
    turns.take(turns.streams(), stop.is_set)  # a stuck cell holds the turn
    outcome = []

    def waiting() -> None:
        try:
            turns.take(turns.streams(), stop.is_set)
            outcome.append("took the turn")
        except Stopped:
            outcome.append("stopped")

    thread = threading.Thread(target=waiting)
    thread.start()
    stop.set()
    thread.join(30)
    assert outcome == ["stopped"]


def test_a_cell_that_keeps_the_turn_too_long_is_run_beside_not_waited_for():
    """A cell of the user's that waits for another replica of its process (a gate) keeps
    the turn: the other replica runs without one after its patience, rather than both
    hanging."""
    turns = GeneratorTurns()
    turns.take(turns.streams(), lambda: False)  # waits for the other replica, turn held
    other = turns.streams()
    assert turns.take(other, lambda: False, patience=0.2) is False
    assert not other.holding
    turns.give(other)  # nothing to give: harmless


def test_an_init_cell_that_holds_the_turn_without_computing_is_waited_for():
    """An init cell imports and builds (reading files: little CPU on a loaded machine) and
    waits for no other replica: the others wait for it past the usual patience, up to
    INIT_PATIENCE_S, and keep their own draws (a fresh cluster's first run said "random
    streams shared" nearly every time)."""
    turns = GeneratorTurns()
    holder = turns.streams()
    turns.take(holder, lambda: False, init=True)
    threading.Timer(0.6, turns.give, (holder,)).start()  # sleeps (no CPU), then gives the turn
    other = turns.streams()
    started = time.monotonic()
    assert turns.take(other, lambda: False, patience=0.2) is True
    assert time.monotonic() - started >= 0.5 and other.holding
    turns.give(other)


def test_a_wait_inside_a_cell_gives_the_turn_up():
    """Two replicas that meet inside their cells (wb.allreduce) must not wait on each other
    for the turn."""
    turns, met = GeneratorTurns(), threading.Barrier(2, timeout=30)
    stopped = lambda: False  # noqa: E731
    done = []

    def replica(k: int) -> None:
        streams = turns.streams()
        meet = turns.released(streams, met.wait, stopped)
        with turns.turn(streams, stopped):
            random.seed(k)
            meet()
            done.append((k, random.random()))

    threads = [threading.Thread(target=replica, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(done) == [(k, random.Random(k).random()) for k in range(2)]


def test_a_wait_inside_a_cell_that_sees_the_stop_leaves_the_cell_with_stopped():
    """The wait returns while another replica's stuck cell has the turn: the stop ends the
    cell with Stopped (not a release of a lock it no longer holds)."""
    turns, stop = GeneratorTurns(), threading.Event()
    mine, stuck = turns.streams(), turns.streams()
    has_it = threading.Event()

    def wait_while_another_cell_gets_stuck() -> None:
        threading.Thread(target=lambda: (turns.take(stuck, stop.is_set), has_it.set()), daemon=True).start()
        assert has_it.wait(30)
        threading.Timer(0.2, stop.set).start()

    with pytest.raises(Stopped):
        with turns.turn(mine, stop.is_set):
            turns.released(mine, wait_while_another_cell_gets_stuck, stop.is_set)()
    assert not mine.holding


# ------------------------------------------------------------------ runs, every placement
def drawing_fdg() -> wb.FDG:
    """Actors draw one number of each kind per step (seeded by replica in their init cell);
    the learner keeps what it received."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "random": random, "SEED": SEED})
    fdg.add_fragment(
        "actor",
        (
            "torch.manual_seed(SEED + replica.index)\n"
            "np.random.seed(SEED + replica.index)\n"
            "random.seed(SEED + replica.index)\n"
        ),
        rate="init",
    )
    fdg.add_fragment(
        "actor",
        (
            "draws = np.array([[float(torch.rand(())), float(np.random.rand()), random.random()]])\n"
            "reward = np.zeros(1)\n"
        ),
        rate="step",
    )
    fdg.add_fragment("learner", "seen = []", rate="init")
    fdg.add_fragment("learner", "seen.append(draws.copy())", rate="iteration")
    return fdg


IN_PROCESS_ACTORS = Policy(
    "actors in one process", (Group(("actor",), ACTORS, (IN_PROCESS,) * ACTORS), Group(("learner",), 1, (IN_PROCESS,)))
)


@pytest.mark.parametrize("placement", ["in one process", "two per worker", "beside the learner"])
def test_every_replica_draws_what_its_seed_gives_under_every_placement(placement, client):
    policy, kwargs = {
        "in one process": (IN_PROCESS_ACTORS, {}),
        "two per worker": (wb.SingleLearnerCoarse(actors=ACTORS), {"cluster": client}),
        "beside the learner": (
            Policy(
                "custom",
                (  # every actor on the learner's worker
                    Group(("actor",), ACTORS, (client_worker(client),) * ACTORS),
                    Group(("learner",), 1, (client_worker(client),)),
                ),
            ),
            {"cluster": client},
        ),
    }[placement]
    run = drawing_fdg().run(
        iterations=ITERATIONS, steps=STEPS, policy=policy, progress=False, keep_state=True, **kwargs
    )
    assert run.status == "finished", run.error
    seen = run.state.fragments["learner"][0]["seen"]  # per iteration: [steps, actors, 3]
    got = np.concatenate(seen)  # [iterations × steps, actors, 3]
    # torch's and NumPy's only: Python's random module is shared with Dask, which draws
    # from it too on a worker (connection back-off), so it is per replica only between
    # replicas (randomness.py says so)
    for k in range(ACTORS):
        assert got[:, k, :2].tolist() == [list(d[:2]) for d in expected_draws(SEED + k, ITERATIONS * STEPS)], (
            f"replica {k} under {placement!r} drew from another replica's stream"
        )


def unseeded_fdg() -> wb.FDG:
    """Actors that draw without seeding anything (NumPy's global generator and ``random``)."""
    fdg = wb.FDG(namespace={"np": np, "random": random})
    fdg.add_fragment(
        "actor", "draws = np.array([[float(np.random.rand()), random.random()]])\nreward = np.zeros(1)", rate="step"
    )
    fdg.add_fragment("learner", "seen = []", rate="init")
    fdg.add_fragment("learner", "seen.append(draws.copy())", rate="iteration")
    return fdg


@pytest.mark.parametrize("placement", ["in one process", "two per worker"])
def test_replicas_that_do_not_seed_draw_apart_wherever_they_share_a_process(placement, client):
    """Four actor replicas of one process once drew the same np.random numbers (and so
    collected the same episodes four times); replicas in fresh processes never did, since
    each seeds those generators from the OS."""
    policy, kwargs = {
        "in one process": (IN_PROCESS_ACTORS, {}),
        "two per worker": (wb.SingleLearnerCoarse(actors=ACTORS), {"cluster": client}),
    }[placement]
    run = unseeded_fdg().run(iterations=1, steps=STEPS, policy=policy, progress=False, keep_state=True, **kwargs)
    assert run.status == "finished", run.error
    got = np.concatenate(run.state.fragments["learner"][0]["seen"])  # [steps, actors, 2]
    for kind, name in ((0, "NumPy"), (1, "random")):
        if kind == 1 and placement != "in one process":
            continue  # Dask draws from Python's random on a worker too (see above)
        columns = {tuple(got[:, k, kind]) for k in range(ACTORS)}
        assert len(columns) == ACTORS, f"{name}: replicas of one process drew the same numbers"


def test_a_seeded_process_gives_unseeded_replicas_the_same_streams_on_every_run():
    """Set apart by a pure function of the process's state and the replica's name: a
    notebook that seeds NumPy once gets the same draws run after run."""
    runs = []
    for _ in range(2):
        np.random.seed(7), random.seed(7)
        run = unseeded_fdg().run(iterations=1, steps=STEPS, policy=IN_PROCESS_ACTORS, progress=False, keep_state=True)
        runs.append(np.concatenate(run.state.fragments["learner"][0]["seen"]).tolist())
    assert runs[0] == runs[1]


def client_worker(client) -> str:
    """The name of one of the cluster's workers (what a Group's workers hold)."""
    from workbench.cluster.connect import inventory_of

    return inventory_of(client).workers[0].name


def test_in_process_learners_that_allreduce_inside_their_cell_draw_their_own_streams():
    """Two learner replicas in one process meet in wb.allreduce inside their cell (so the
    turn is given up there) and each draws from its own stream before and after."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb, "SEED": SEED})
    fdg.add_fragment("actor", "reward = np.zeros(1)", rate="step")
    fdg.add_fragment("learner", "torch.manual_seed(SEED + replica.index)\nseen = []", rate="init")
    fdg.add_fragment(
        "learner",
        (
            "before = float(torch.rand(()))\n"
            "mean = float(wb.allreduce(torch.tensor(before)))\n"
            "seen.append((before, mean, float(torch.rand(()))))\n"
        ),
        rate="iteration",
    )
    policy = Policy(
        "two learners here", (Group(("actor",), 2, (IN_PROCESS,) * 2), Group(("learner",), 2, (IN_PROCESS,) * 2))
    )
    run = fdg.run(iterations=2, steps=1, policy=policy, progress=False, keep_state=True)
    assert run.status == "finished", run.error
    mine = {}
    for k in range(2):
        torch.manual_seed(SEED + k)
        mine[k] = [float(torch.rand(())) for _ in range(4)]  # before, after; twice
    for k, replica in enumerate(run.state.fragments["learner"]):
        assert [(b, a) for b, _, a in replica["seen"]] == [(mine[k][0], mine[k][1]), (mine[k][2], mine[k][3])]
        for i, (_, mean, _) in enumerate(replica["seen"]):
            assert mean == pytest.approx((mine[0][2 * i] + mine[1][2 * i]) / 2)


# ------------------------------------------------------------------ own_random=False
def meeting_fdg(replicas: int) -> wb.FDG:
    """Actors whose step cell waits for every other actor's (a gate of the user's, shared
    through the notebook): only replicas that overlap their cells get through at once."""
    gate = threading.Barrier(replicas, timeout=30)
    fdg = wb.FDG(namespace={"np": np, "gate": gate})
    fdg.add_fragment("actor", "gate.wait()\nreward = np.zeros(1)", rate="step")
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    return fdg


@pytest.mark.parametrize("own_random", [True, False])
def test_own_random_off_lets_replicas_of_one_process_overlap_their_cells(own_random):
    """With their own streams, replicas of one process take turns: a cell that waits for
    another replica's holds the turn, and the other runs beside it only after its patience,
    which the run says. With ``own_random=False`` they overlap from the start: nothing to
    say (and no patience spent)."""
    policy = Policy("actors here", (Group(("actor",), 2, (IN_PROCESS,) * 2), Group(("learner",), 1, (IN_PROCESS,))))
    run = meeting_fdg(2).run(iterations=2, steps=2, policy=policy, progress=False, own_random=own_random)
    assert run.status == "finished", run.error
    said = [e for e in run.events if e.kind == "random streams shared"]
    if own_random:
        assert said and all("--no-own-random" in e.message for e in said)
        assert any("the actor step cell of replica" in e.message for e in said)
    else:
        assert said == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's CPU time is read from /proc")
def test_a_cell_that_computes_past_the_patience_keeps_the_turn_and_the_draws_stay_their_own():
    """A replica's cell that holds the turn for longer than PATIENCE_S while computing (an
    import, building a model: its thread's CPU time grows) is not waiting for anyone: the
    other replica of its process waits on, nothing is said, and each draws its own numbers
    (the gate test above is the other side: a holder that waits is run beside after 1 s)."""
    fdg = wb.FDG(namespace={"np": np, "time": time, "PATIENCE_S": PATIENCE_S})
    fdg.add_fragment("actor", "np.random.seed(7 + replica.index)\ndrawn = []", rate="init")
    fdg.add_fragment(
        "actor",
        (
            "started = time.thread_time()\n"
            "while time.thread_time() - started < 1.5 * PATIENCE_S:   # computing, not waiting\n"
            "    np.ones((64, 64)) @ np.ones((64, 64))\n"
            "drawn.append(float(np.random.rand()))\n"
            "reward = np.zeros(1)"
        ),
        rate="step",
    )
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    policy = Policy("actors here", (Group(("actor",), 2, (IN_PROCESS,) * 2), Group(("learner",), 1, (IN_PROCESS,))))
    run = fdg.run(iterations=1, steps=2, policy=policy, progress=False, keep_state=True)
    assert run.status == "finished", run.error
    assert [e for e in run.events if e.kind == "random streams shared"] == []
    for k, replica in enumerate(run.state.fragments["actor"]):
        assert replica["drawn"] == list(np.random.RandomState(7 + k).rand(2))


def test_own_random_is_a_flag_of_every_surface():
    from workbench.config import RunConfig, parse_run_line

    assert RunConfig().own_random is True
    assert parse_run_line("--no-own-random")["own_random"] is False
    with pytest.raises(wb.errors.RunConfigError):
        RunConfig(own_random="no")


# ------------------------------------------------------------------ resume continues the streams
@pytest.mark.parametrize("how", ["in one process", "two per worker", "from a checkpoint file"])
def test_a_resumed_run_draws_what_the_uninterrupted_run_draws(how, request, tmp_path):
    """Each replica's streams are part of its state: resumed in the layout that saved them
    (same policy, same counts), a replica continues its draws where it stopped, so two
    halves give what one run gives. From a checkpoint file the actors' init cells run again
    (and seed again): the saved streams are put back after them."""
    policy, kwargs, resume = IN_PROCESS_ACTORS, {}, None
    if how == "two per worker":
        policy, kwargs = wb.SingleLearnerCoarse(actors=ACTORS), {"cluster": request.getfixturevalue("client")}
    straight = drawing_fdg().run(iterations=4, steps=STEPS, policy=policy, progress=False, keep_state=True, **kwargs)
    first = drawing_fdg().run(
        iterations=2,
        steps=STEPS,
        policy=policy,
        progress=False,
        keep_state=True,
        checkpoint_dir=str(tmp_path) if how == "from a checkpoint file" else None,
        **kwargs,
    )
    resume = str(tmp_path) if how == "from a checkpoint file" else first.state
    second = drawing_fdg().run(
        iterations=2, steps=STEPS, policy=policy, progress=False, keep_state=True, resume=resume, **kwargs
    )
    assert second.status == "finished", second.error
    whole = np.concatenate(straight.state.fragments["learner"][0]["seen"])[:, :, :2]  # torch, NumPy
    halves = np.concatenate(second.state.fragments["learner"][0]["seen"])[:, :, :2]
    assert halves.shape == whole.shape == (4 * STEPS, ACTORS, 2)
    assert halves.tolist() == whole.tolist(), f"resumed {how}, the replicas drew other numbers"


def test_a_resume_in_another_layout_starts_the_streams_afresh():
    """Streams saved by 4 actors in one process do not fit 2 actors: the actors' init cells
    run again (the count changed) and seed them, as a fresh run does."""
    two = Policy("two actors here", (Group(("actor",), 2, (IN_PROCESS,) * 2), Group(("learner",), 1, (IN_PROCESS,))))
    first = drawing_fdg().run(iterations=1, steps=STEPS, policy=IN_PROCESS_ACTORS, progress=False, keep_state=True)
    second = drawing_fdg().run(
        iterations=1, steps=STEPS, policy=two, progress=False, keep_state=True, resume=first.state
    )
    assert second.status == "finished", second.error
    drawn = second.state.fragments["learner"][0]["seen"][-1]  # [steps, 2 actors, 3]
    for k in range(2):
        assert drawn[:, k, :2].tolist() == [list(d[:2]) for d in expected_draws(SEED + k, STEPS)]


@pytest.mark.parametrize("placement", ["in one process", "two per worker"])
def test_a_cell_edited_mid_run_leaves_every_replicas_draws_as_they_were(placement, request):
    """An edit applies at the next iteration boundary, where the replicas are laid out again
    with their state: their streams go with it, so an edit that draws nothing new changes
    no draw (contract 3 and 1 together)."""
    from tests.live.test_live_changes import At

    policy, kwargs = IN_PROCESS_ACTORS, {}
    if placement == "two per worker":
        policy, kwargs = wb.SingleLearnerCoarse(actors=ACTORS), {"cluster": request.getfixturevalue("client")}
    # the actors act with the learner's latest value (as with weights), so none runs more
    # than an iteration ahead and the edit lands mid-run
    learner = "time.sleep(0.02)\nseen.append(draws.copy())\nscale = 1.0"

    def slow_fdg() -> wb.FDG:
        fdg = drawing_fdg()
        fdg.namespace["time"] = time
        fdg.add_fragment("learner", "seen = []\nscale = 1.0", rate="init")
        fdg.add_fragment("learner", learner, rate="iteration")
        fdg.add_fragment(
            "actor",
            (
                "draws = np.array([[float(torch.rand(())), float(np.random.rand()), random.random()]]) * scale\n"
                "reward = np.zeros(1)\n"
            ),
            rate="step",
        )
        return fdg

    straight = slow_fdg().run(iterations=8, steps=STEPS, policy=policy, progress=False, keep_state=True, **kwargs)
    fdg = slow_fdg()
    edit = At(0, lambda: fdg.add_fragment("learner", learner + "  # edited", rate="iteration"))
    edited = fdg.run(
        iterations=8, steps=STEPS, policy=policy, progress=False, keep_state=True, loggers=[edit], **kwargs
    )
    assert edited.status == "finished" and [e.kind for e in edited.events].count("edited") == 1, edited.events
    whole = np.concatenate(straight.state.fragments["learner"][0]["seen"])[:, :, :2]
    got = np.concatenate(edited.state.fragments["learner"][0]["seen"])[:, :, :2]
    assert got.tolist() == whole.tolist(), f"an edit under {placement!r} changed the replicas' draws"
