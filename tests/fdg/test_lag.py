"""Pipelining (``Policy.lag``, the ``Pipelined`` preset): actors read what the learner writes
each iteration ``lag`` iterations late — and nothing else changes. Checked on the wiring
(which emission each task reads), on the routes that lag (only a learner's per-iteration
values to groups with step cells), and on the policy as plain data."""

from __future__ import annotations

import pytest

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import make_plan
from workbench.fdg.policy import Async, Group, Pipelined, Policy, SingleLearnerCoarse, resolve_policy
from workbench.fdg.wiring import wire

CELLS = [
    ("env", "obs = 0", "init"),
    ("learner", "w = 0\nconst = 1", "init"),
    ("actor", "act = obs + w + const", "step"),
    ("env", "obs = act", "step"),
    ("learner", "w = obs.sum()", "iteration"),
]


def loop(cells=CELLS) -> Graph:
    fdg = Graph()
    for name, code, rate in cells:
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def split(lag: int, fdg=None) -> Policy:
    return Policy("p", (Group(("actor", "env"), 1, ("w0",)), Group(("learner",), 1, ("w1",))), lag=lag)


def read_by_actor(fdg, policy, iterations=5) -> list[tuple[int, int | None]]:
    """(actor task's iteration, the iteration of the learner task whose w it reads)."""
    tasks = wire(make_plan(fdg, policy), iterations)
    by_index = {t.index: t for t in tasks}
    return [
        (t.iteration, by_index[i.producer_task].iteration)
        for t in tasks
        if t.spec.group == "actor+env" and t.iteration is not None
        for i in t.inputs
        if i.key == "learner.w"
    ]


@pytest.mark.parametrize("lag", [0, 1, 2, 3])
def test_actors_read_the_learners_value_lag_iterations_older(lag):
    """Without a lag iteration i's steps read the learner's value of i - 1; with one, of
    i - 1 - lag; the first iterations read the init value (None) until there is one."""
    reads = read_by_actor(loop(), split(lag), iterations=6)
    assert reads == [(i, (i - 1 - lag) if i - 1 - lag >= 0 else None) for i in range(6)]


def test_only_the_learners_per_iteration_values_to_actors_lag():
    fdg = loop()
    routes = {r.key: r.lag for r in make_plan(fdg, split(2)).routes}
    # the learner's w lags; what the actors send the learner (stacked steps) and what the
    # learner wrote only at init (const) do not
    assert routes == {"learner.w": 2, "stacked:env.obs": 0, "learner.const": 0}

    # the learner's own reads are the same tasks with or without a lag
    def learner_inputs(lag):
        return [
            [i.producer_task for i in t.inputs]
            for t in wire(make_plan(fdg, split(lag)), 4)
            if t.spec.group == "learner"
        ]

    assert learner_inputs(0) == learner_inputs(2)


def test_groups_with_steps_on_both_sides_do_not_lag():
    """Per-step values between an env group and an actor group are the loop itself."""
    fdg = loop()
    policy = Policy(
        "p", (Group(("actor",), 1, ("w0",)), Group(("env",), 1, ("w1",)), Group(("learner",), 1, ("w1",))), lag=1
    )
    lags = {r.key: r.lag for r in make_plan(fdg, policy).routes}
    assert lags["step:actor.act"] == 0 and lags["step:env.obs"] == 0 and lags["learner.w"] == 1


def test_a_lagged_value_with_no_init_value_is_a_clear_error():
    fdg = loop(
        [
            ("env", "obs = 0", "init"),
            ("actor", "act = obs", "step"),
            ("env", "obs = act", "step"),
            ("learner", "w = obs.sum()", "iteration"),
            ("actor", "seen = w", "iteration"),
        ]
    )
    wire(make_plan(fdg, split(0)), 3)  # reads w after the learner wrote it in the same iteration: fine
    with pytest.raises(
        PlacementError,
        match=r"with lag 1 \(p\), 'actor' reads 'w' 1 iteration\(s\) late.*"
        r"first value in the --init cell of 'learner'",
    ):
        make_plan(fdg, split(1))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_a_bad_lag_is_refused(bad):
    with pytest.raises(PlacementError, match="lag must be a whole number ≥ 0"):
        Policy("p", (Group(("a",)),), lag=bad)
    with pytest.raises(PlacementError, match="lag"):
        SingleLearnerCoarse(lag=bad)


def test_lag_and_asynchronous_do_not_combine():
    with pytest.raises(PlacementError, match="lag and asynchronous do not combine"):
        Policy("p", (Group(("a",)),), asynchronous=True, lag=1)
    with pytest.raises(TypeError):
        Async(lag=1)


def test_the_lag_survives_json_and_the_repr_says_it():
    policy = split(2)
    assert Policy.from_json(policy.to_json()) == policy and policy.to_dict()["lag"] == 2
    assert repr(policy).endswith(", lag 2)")
    assert Policy.from_dict({"groups": [{"fragments": ["a"]}]}).lag == 0  # files from before the field
    with pytest.raises(PlacementError):
        Policy.from_dict({"groups": [{"fragments": ["a"]}], "lag": -2})


def inventory(count: int) -> Inventory:
    return Inventory(tuple(WorkerInfo(f"tcp://h:{i}", f"w{i}") for i in range(count)))


@pytest.mark.parametrize(
    "workers, actors, expected",
    [(1, None, ("w0",)), (2, None, ("w1",)), (4, None, ("w1", "w2", "w3")), (3, 4, ("w1", "w2", "w0", "w1"))],
)
def test_pipelined_keeps_the_learners_worker_for_the_learner(workers, actors, expected):
    policy = resolve_policy(Pipelined(actors=actors), loop(), inventory(workers))
    acting, learning = policy.groups
    assert acting.workers == expected and learning.workers == ("w0",)
    assert policy.lag == 1 and policy.name == "Pipelined"
    assert resolve_policy("pipelined", loop(), inventory(workers)).lag == 1


def test_coarse_without_a_lag_places_as_before():
    policy = SingleLearnerCoarse(actors=1).place(loop(), inventory(2))
    assert policy.groups[0].workers == ("w0",) and policy.lag == 0
    lagged = SingleLearnerCoarse(actors=1, lag=2).place(loop(), inventory(2))
    assert lagged.groups[0].workers == ("w1",) and lagged.lag == 2


def test_an_fdg_without_a_learner_has_nothing_to_lag():
    fdg = loop([("env", "obs = 0", "init"), ("actor", "act = obs", "step"), ("env", "obs = act", "step")])
    assert SingleLearnerCoarse(lag=1).place(fdg, inventory(2)).lag == 0
