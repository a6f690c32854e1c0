"""The task stream a plan yields and its wiring: which messages each task sends and waits for (all pure data)."""

from __future__ import annotations

import pytest

from workbench.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.plan import Item, Plan, TaskSpec, make_plan
from workbench.fdg.policy import Async, Group, Inline, Policy, SingleLearnerCoarse
from workbench.fdg.wiring import WiredEmit, WiredInput, receivers_for, senders_for, wire, wire_stream

from .conftest import STACKED, make_inventory

ACTING = ("actor", "env")


def coarse(fdg, n=2, **kwargs):
    return SingleLearnerCoarse(**kwargs).place(fdg, make_inventory(n))


# ----------------------------------------------------------------------------- the task stream
def describe(plan: Plan, iterations: int, **kwargs) -> list[str]:
    return [t.describe() for t in plan.tasks(iterations, **kwargs)]


def test_inline_tasks(ppo_fdg):
    plan = make_plan(ppo_fdg, Inline().place(ppo_fdg))
    g = "env+learner+actor"
    assert describe(plan, 3) == [
        f"{g}: init env, learner, actor · steps actor, env · iteration learner, actor (iteration 0)",
        f"{g}: steps actor, env · iteration learner, actor (iteration 1)",
        f"{g}: steps actor, env · iteration learner, actor (iteration 2)",
    ]
    first = next(iter(plan.tasks(1)))
    assert first == TaskSpec(
        g,
        (
            Item("init", ("env", "learner", "actor"), None),
            Item("step", ("actor", "env"), 0),
            Item("iteration", ("learner", "actor"), 0),
        ),
    )
    assert first.iteration == 0


def test_plan_docstring_example():
    fdg = Graph()
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = action", rate="step")
    plan = make_plan(fdg, Inline().place(fdg))
    assert [t.describe() for t in plan.tasks(iterations=1)] == ["env+actor: init env · steps actor, env (iteration 0)"]


def test_coarse_tasks(ppo_fdg):
    plan = make_plan(ppo_fdg, coarse(ppo_fdg, 2))
    assert describe(plan, 2) == [
        "actor+env: init env (init)",
        "learner: init learner (init)",
        "actor+env: init actor · steps actor, env (iteration 0)",
        "learner: iteration learner (iteration 0)",
        "actor+env: iteration actor · steps actor, env (iteration 1)",
        "learner: iteration learner (iteration 1)",
        "actor+env: iteration actor (iteration 1)",
    ]


def test_tasks_without_init_and_from_a_start_iteration(ppo_fdg):
    plan = make_plan(ppo_fdg, coarse(ppo_fdg, 2))
    assert describe(plan, 1, start=5, with_init=False) == [
        "actor+env: steps actor, env (iteration 5)",
        "learner: iteration learner (iteration 5)",
        "actor+env: iteration actor (iteration 5)",
    ]
    assert describe(plan, 0, with_init=False) == []


def test_tasks_with_zero_iterations_still_yield_the_init_tasks(ppo_fdg):
    plan = make_plan(ppo_fdg, coarse(ppo_fdg, 2))
    assert describe(plan, 0) == [
        "actor+env: init env (init)",
        "learner: init learner (init)",
        "actor+env: init actor (init)",
    ]


@pytest.mark.parametrize("policy", ["inline", "coarse1", "coarse3"])
def test_never_two_step_blocks_in_one_task(ppo_fdg, policy):
    p = Inline().place(ppo_fdg) if policy == "inline" else coarse(ppo_fdg, int(policy[-1]))
    tasks = list(make_plan(ppo_fdg, p).tasks(5))
    for task in tasks:
        assert sum(item.rate == "step" for item in task.items) <= 1
        assert all(
            f in p.group_of(f).fragments and p.group_of(f).name == task.group
            for item in task.items
            for f in item.fragments
        )
    steps = [item.iteration for t in tasks for item in t.items if item.rate == "step"]
    assert steps == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------- wiring
def test_wire_coarse(ppo_fdg):
    tasks = wire(make_plan(ppo_fdg, coarse(ppo_fdg, 2)), iterations=2)
    assert [(t.index, t.spec.group, t.iteration) for t in tasks] == [
        (0, "actor+env", None),
        (1, "learner", None),
        (2, "actor+env", 0),
        (3, "learner", 0),
        (4, "actor+env", 1),
        (5, "learner", 1),
        (6, "actor+env", 1),
    ]
    stacked_keys = {f"stacked:{p}.{n}" for p, n in STACKED}
    weights_in = lambda producer: (WiredInput("learner.weights", "learner", producer, "broadcast", 0),)
    weights_out = (WiredEmit("learner.weights", "actor+env", "broadcast"),)

    assert tasks[0].inputs == () and tasks[0].emits == ()
    # the learner's init emits the first weights; the actor's init (merged with the first steps) reads them
    assert tasks[1].inputs == () and tasks[1].emits == weights_out
    assert tasks[2].inputs == weights_in(1)
    for acting, learning in ((2, 3), (4, 5)):
        assert {e.key for e in tasks[acting].emits} == stacked_keys
        assert {(e.consumer_group, e.spatial) for e in tasks[acting].emits} == {("learner", "gather")}
        assert {i.key for i in tasks[learning].inputs} == stacked_keys
        assert {(i.producer_group, i.producer_task, i.spatial, i.axis) for i in tasks[learning].inputs} == {
            ("actor+env", acting, "gather", 1)
        }
        assert tasks[learning].emits == weights_out
    assert tasks[4].inputs == weights_in(3)
    assert tasks[6].inputs == weights_in(5) and tasks[6].emits == ()


def test_wire_async_reads_an_init_only_value_from_the_init_task():
    """Async: the learner answers each acting replica with what its iteration cell writes;
    a value it wrote only at init is never answered, so every iteration reads the init
    broadcast (it used to wait for an answer that never came: a stall)."""
    fdg = Graph()
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("actor", "action = obs", rate="step")
    fdg.add_fragment("env", "obs = action + 1", rate="step")
    fdg.add_fragment("actor", "x = table + weights", rate="iteration")
    fdg.add_fragment("learner", "table = 1\nweights = 0", rate="init")
    fdg.add_fragment("learner", "weights = obs.sum()", rate="iteration")
    tasks = wire(make_plan(fdg, Async().place(fdg, make_inventory(2))), iterations=3)
    acting = [t.index for t in tasks if t.spec.group == "actor+env" and t.iteration is not None]
    init = next(t.index for t in tasks if t.spec.group == "learner" and t.iteration is None)
    reading = [t for t in tasks if t.spec.group == "actor+env" and t.inputs]
    assert len(reading) == 3
    for task in reading:
        by_key = {w.key: w.producer_task for w in task.inputs}
        assert by_key["learner.table"] == init
        # weights: the answer to this group's previous message
        assert by_key["learner.weights"] == max(i for i in acting if i < task.index)


def test_wire_inline_has_no_messages(ppo_fdg):
    tasks = wire(make_plan(ppo_fdg, Inline().place(ppo_fdg)), iterations=2)
    assert len(tasks) == 2
    assert all(t.inputs == () and t.emits == () for t in tasks)


def test_wire_docstring_example():
    fdg = Graph()
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("actor", "act = obs", rate="step")
    fdg.add_fragment("env", "obs = act", rate="step")
    fdg.add_fragment("learner", "w = obs.sum()", rate="iteration")
    policy = Policy("p", (Group(("actor", "env"), 2), Group(("learner",), 1)))
    tasks = wire(make_plan(fdg, policy), iterations=1)
    assert [(t.index, t.spec.group, [i.producer_task for i in t.inputs]) for t in tasks] == [
        (0, "actor+env", []),
        (1, "learner", [0]),
    ]


def test_wire_rejects_a_read_before_the_first_value():
    fdg = Graph()
    fdg.add_fragment("learner", "w = learn(obs)")
    fdg.add_fragment("actor", "obs = pick(w)", rate="step")
    plan = make_plan(fdg, Policy("p", (Group(("actor",), 2), Group(("learner",), 1))))
    with pytest.raises(
        PlacementError,
        match=r"learner → actor: w \(latest value, fixed per iteration\): 'actor' "
        r"needs 'w' before 'learner' has produced it\. Give it a first value "
        r"in 'learner''s --init cell\.",
    ):
        wire(plan, 1)


def test_wire_a_later_chunk_without_init(ppo_fdg):
    """A chunk resumed at iteration 3: the steps need nothing from before (weights came at the
    previous iteration's end), the learner reads this chunk's steps, indices restart at 0."""
    tasks = wire(make_plan(ppo_fdg, coarse(ppo_fdg, 2)), 1, start=3, with_init=False)
    assert [(t.index, t.spec.group, t.iteration) for t in tasks] == [
        (0, "actor+env", 3),
        (1, "learner", 3),
        (2, "actor+env", 3),
    ]
    assert tasks[0].inputs == ()
    assert {i.producer_task for i in tasks[1].inputs} == {0}
    assert [i.producer_task for i in tasks[2].inputs] == [1]


def test_wire_stream_is_lazy(ppo_fdg):
    stream = wire_stream(make_plan(ppo_fdg, coarse(ppo_fdg, 2)), iterations=10**9)
    first = [next(stream) for _ in range(4)]
    assert [t.index for t in first] == [0, 1, 2, 3]
    assert first == wire(make_plan(ppo_fdg, coarse(ppo_fdg, 2)), iterations=1)[:4]


@pytest.mark.parametrize(
    "spatial, consumer, producers, expected",
    [
        ("gather", 0, 3, [0, 1, 2]),
        ("one-to-one", 1, 2, [1]),
        ("broadcast", 2, 1, [0]),
        ("scatter", 2, 1, [0]),
    ],
)
def test_senders_for(spatial, consumer, producers, expected):
    assert senders_for(spatial, consumer, producers) == expected


@pytest.mark.parametrize(
    "spatial, producer, consumers, expected",
    [
        ("gather", 2, 1, [0]),
        ("one-to-one", 1, 2, [1]),
        ("broadcast", 0, 3, [0, 1, 2]),
        ("broadcast", 1, 3, []),
        ("scatter", 0, 2, [0, 1]),
    ],
)
def test_receivers_for(spatial, producer, consumers, expected):
    assert receivers_for(spatial, producer, consumers) == expected


@pytest.mark.parametrize("spatial, m, n", [("gather", 3, 1), ("broadcast", 1, 4), ("one-to-one", 3, 3)])
def test_senders_and_receivers_mirror_each_other(spatial, m, n):
    sends = {(p, c) for p in range(m) for c in receivers_for(spatial, p, n)}
    receives = {(p, c) for c in range(n) for p in senders_for(spatial, c, m)}
    assert sends == receives
