"""The FDG's validation: the errors a graph of fragments gets for undefined names, conflicting
writers and cycles, each with what to do."""

from __future__ import annotations

import pytest

from workbench.errors import ConflictingWritersError, FDGError, StepCycleError, UndefinedNameError
from workbench.fdg.fragment import Fragment
from workbench.fdg.graph import Graph, Schedule


# ----------------------------------------------------------------------------- validation errors
def test_validate_empty_fdg():
    with pytest.raises(FDGError, match=r"the FDG has no fragments yet: register cells with %%fragment NAME"):
        Graph().validate()


def test_undefined_name(ppo_fdg, notebook_ns):
    del notebook_ns["train"]
    with pytest.raises(
        UndefinedNameError,
        match=r"fragment 'learner' \(iteration cell\) reads 'train' \(cell line 1\), but no "
        r"fragment writes it and the notebook does not define it\.",
    ) as info:
        ppo_fdg.validate(notebook_ns)
    err = info.value
    assert (err.fragment, err.rate, err.name, err.line) == ("learner", "iteration", "train", 1)
    assert "--reads/--writes" in str(err)
    assert isinstance(err, FDGError)


def test_undefined_name_without_a_close_match_has_no_hint():
    fdg = Graph()
    fdg.add_fragment("env", "obs = zqxjv", rate="init")
    with pytest.raises(UndefinedNameError, match=r"reads 'zqxjv' \(cell line 1\)") as info:
        fdg.validate({})
    assert "Did you mean" not in str(info.value)


def test_undefined_name_suggests_a_close_match(ppo_fdg, notebook_ns):
    notebook_ns["trian"] = notebook_ns.pop("train")
    with pytest.raises(UndefinedNameError, match=r"reads 'train' .* Did you mean 'trian'\?"):
        ppo_fdg.validate(notebook_ns)


def test_undefined_name_suggests_a_fragment_written_name():
    fdg = Graph()
    fdg.add_fragment("env", "observation = reset()", rate="init")
    fdg.add_fragment("actor", "x = 1\naction = pick(observatio)", rate="step")
    with pytest.raises(
        UndefinedNameError,
        match=r"fragment 'actor' \(step cell\) reads 'observatio' \(cell line 2\).*"
        r"Did you mean 'observation'\?",
    ) as info:
        fdg.validate({"reset": 1, "pick": 1})
    assert info.value.line == 2


def test_builtins_and_fragment_written_names_need_no_namespace():
    fdg = Graph()
    fdg.add_fragment("env", "obs = list(range(3))", rate="init")
    fdg.add_fragment("actor", "action = len(obs)", rate="step")
    assert fdg.validate({}).step_order == ("actor",)


def test_conflicting_writers_with_a_reader():
    fdg = Graph()
    fdg.add_fragment("a", "t = 1", rate="step")
    fdg.add_fragment("b", "t = 2", rate="step")
    with pytest.raises(
        ConflictingWritersError,
        match=r"'t' is written by fragments 'a', 'b' and read by 'c': an interface has "
        r"exactly one writer\. Rename the name in all but one",
    ) as info:
        fdg.add_fragment("c", "z = t", rate="iteration")
    assert (info.value.name, info.value.writers, info.value.readers) == ("t", ["a", "b"], ["c"])
    assert "c" not in fdg


def test_conflicting_writer_added_after_the_reader_is_rejected():
    fdg = Graph()
    fdg.add_fragment("a", "t = 1", rate="step")
    fdg.add_fragment("c", "z = t", rate="iteration")
    before = fdg.copy()
    with pytest.raises(ConflictingWritersError, match=r"'t' is written by fragments 'a', 'b' and read by 'c'"):
        fdg.add_fragment("b", "t = 2", rate="step")
    assert fdg == before


def test_private_temporaries_in_two_fragments_are_allowed():
    fdg = Graph()
    fdg.add_fragment("a", "tmp = f()\nout_a = tmp", rate="step")
    fdg.add_fragment("b", "tmp = g()\nout_b = tmp", rate="step")
    fdg.add_fragment("learner", "w = out_a + out_b")
    assert fdg.writers()["tmp"] == ["a", "b"]
    assert all(e.name != "tmp" for e in fdg.interfaces)
    assert fdg.validate({"f": 1, "g": 1}).step_order == ("a", "b")


def test_step_cycle_without_init_value():
    fdg = Graph()
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = advance(action)", rate="step")
    message = (
        r"step cells form a cycle that no loop carries: actor --action--> env --obs--> actor\. "
        r".*Give one of 'action', 'obs' a first value in its writer's --init cell"
    )
    with pytest.raises(StepCycleError, match=message) as info:
        fdg.validate()
    assert info.value.cycle == [("actor", "action", "env"), ("env", "obs", "actor")]
    with pytest.raises(StepCycleError):
        fdg.schedule()


@pytest.mark.parametrize("env_first", [False, True])
def test_step_ring_is_allowed_when_the_producer_init_writes_the_name(env_first):
    fdg = Graph()
    cells = [("actor", "step", "action = pick(obs)"), ("env", "step", "obs = advance(action)")]
    for name, rate, code in reversed(cells) if env_first else cells:
        fdg.add_fragment(name, code, rate=rate)
    fdg.add_fragment("env", "obs = reset()", rate="init")
    schedule = fdg.validate({"pick": 1, "advance": 1, "reset": 1})
    # env's init cell carries obs, so actor runs first and env consumes this step's action
    assert schedule == Schedule(("env",), ("actor", "env"), ())


def test_step_ring_carried_from_the_other_side():
    fdg = Graph()
    fdg.add_fragment("actor", "action = 0", rate="init")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = advance(action)", rate="step")
    assert fdg.schedule().step_order == ("env", "actor")


def test_three_fragment_step_cycle_message():
    fdg = Graph()
    fdg.add_fragment("a", "x = f(z)", rate="step")
    fdg.add_fragment("b", "y = f(x)", rate="step")
    fdg.add_fragment("c", "z = f(y)", rate="step")
    with pytest.raises(StepCycleError, match=r"a --x--> b --y--> c --z--> a\..*'x', 'y', 'z'"):
        fdg.schedule()


def test_iteration_ring_with_init_value_is_allowed():
    fdg = Graph()
    fdg.add_fragment("learner", "w = 0", rate="init")
    fdg.add_fragment("learner", "w = learn(g)")
    fdg.add_fragment("critic", "g = grad(w)", rate="iteration")
    assert fdg.schedule().iteration_order == ("critic", "learner")


def test_init_cell_reading_a_name_its_producer_writes_only_every_iteration():
    fdg = Graph()
    fdg.add_fragment("learner", "weights = learn()")
    fdg.add_fragment("actor", "policy = load(weights)", rate="init")
    with pytest.raises(
        FDGError,
        match=r"fragment actor's init cell reads 'weights', which learner writes only "
        r"every iteration; init cells run before any step\. Write 'weights' in "
        r"learner's --init cell too",
    ):
        fdg.validate()


def test_init_cell_reading_a_name_its_producer_writes_only_every_step():
    fdg = Graph()
    fdg.add_fragment("env", "obs = step()", rate="step")
    fdg.add_fragment("actor", "first = obs", rate="init")
    with pytest.raises(FDGError, match=r"reads 'obs', which env writes only every step"):
        fdg.validate()


def test_validate_reports_conflicts_in_an_fdg_built_from_fragments():
    a = Fragment("a").with_cell("step", "t = 1")
    b = Fragment("b").with_cell("step", "t = 2")
    c = Fragment("c").with_cell("iteration", "z = t")
    with pytest.raises(ConflictingWritersError, match=r"'t' is written by fragments 'a', 'b'"):
        Graph([a, b, c]).validate()
