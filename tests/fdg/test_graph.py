"""workbench.fdg fragments, interfaces and the FDG: edges, timings, schedule, validation errors."""

from __future__ import annotations

import pytest

from workbench.errors import ConflictingWritersError, FDGError, FragmentOptionError, FragmentSyntaxError
from workbench.fdg.fragment import RATES, Cell, Fragment, default_rate
from workbench.fdg.graph import Graph, Schedule
from workbench.fdg.interface import TIMINGS, Interface, spatial_kind

from .conftest import NOTEBOOK_NAMES, STACKED, build_ppo_fdg


def edge(fdg: Graph, producer: str, name: str, consumer: str, rate: str) -> Interface:
    found = [
        e
        for e in fdg.interfaces
        if (e.producer, e.name, e.consumer, e.consumer_rate) == (producer, name, consumer, rate)
    ]
    assert len(found) == 1, f"no unique edge {producer} -{name}-> {consumer}.{rate}: {fdg.interfaces}"
    return found[0]


def two(producer_rate: str, consumer_rate: str, *, also_init: bool = False) -> Graph:
    fdg = Graph()
    if also_init:
        fdg.add_fragment("p", "x = 0", rate="init")
    fdg.add_fragment("p", "x = make()", rate=producer_rate)
    fdg.add_fragment("c", "y = x", rate=consumer_rate)
    return fdg


# ----------------------------------------------------------------------------- interface timing
@pytest.mark.parametrize(
    "producer_rates, consumer_rate, timing, source",
    [
        (("step",), "step", "per-step", "step"),
        (("init", "step"), "step", "per-step", "step"),
        (("step",), "iteration", "stacked", "step"),
        (("init", "step"), "iteration", "stacked", "step"),
        (("iteration",), "step", "latest", "iteration"),
        (("init", "iteration"), "step", "latest", "iteration"),
        (("init",), "step", "latest", "init"),
        (("init",), "iteration", "latest", "init"),
        (("iteration",), "iteration", "per-iteration", "iteration"),
        (("init", "iteration"), "iteration", "per-iteration", "iteration"),
        (("init",), "init", "once", "init"),
        (("init", "iteration"), "init", "once", "init"),
    ],
)
def test_interface_timing_for_every_rate_pair(producer_rates, consumer_rate, timing, source):
    e = Interface("x", "p", producer_rates, "c", consumer_rate)
    assert e.timing == timing
    assert e.source_rate == source
    assert e.carried_from_init is ("init" in producer_rates)
    assert e.describe() == f"p → c: x ({TIMINGS[timing]})"


def test_interface_docstring_example():
    assert Interface("obs", "env", ("init", "step"), "learner", "iteration").timing == "stacked"


@pytest.mark.parametrize(
    "producer_rate, consumer_rate, also_init, timing",
    [
        ("step", "step", False, "per-step"),
        ("step", "iteration", False, "stacked"),
        ("iteration", "step", False, "latest"),
        ("iteration", "iteration", False, "per-iteration"),
        ("init", "init", False, "once"),
        ("init", "step", False, "latest"),
        ("iteration", "init", True, "once"),
    ],
)
def test_fdg_builds_interfaces_with_timings(producer_rate, consumer_rate, also_init, timing):
    fdg = two(producer_rate, consumer_rate, also_init=also_init)
    (e,) = fdg.interfaces
    assert (e.name, e.producer, e.consumer, e.consumer_rate) == ("x", "p", "c", consumer_rate)
    assert e.timing == timing
    expected_rates = tuple(r for r in RATES if r == producer_rate or (also_init and r == "init"))
    assert e.producer_rates == expected_rates


@pytest.mark.parametrize(
    "m, n, scatter, kind",
    [
        (1, 1, False, "one-to-one"),
        (3, 3, False, "one-to-one"),
        (3, 3, True, "one-to-one"),
        (4, 1, False, "gather"),
        (4, 1, True, "gather"),
        (1, 4, False, "broadcast"),
        (1, 4, True, "scatter"),
        (2, 3, False, "incompatible"),
        (3, 2, True, "incompatible"),
    ],
)
def test_spatial_kind(m, n, scatter, kind):
    assert spatial_kind(m, n, scatter=scatter) == kind


# ----------------------------------------------------------------------------- fragments
def test_default_rate():
    for role in ("learner", "trainer", "optimizer"):
        assert default_rate(role) == "iteration"
    for other in ("actor", "env", "buffer", "learners"):
        assert default_rate(other) == "step"


def test_add_fragment_uses_the_default_rate():
    fdg = Graph()
    assert fdg.add_fragment("learner", "w = 1").rates == ("iteration",)
    assert fdg.add_fragment("actor", "a = w").rates == ("step",)


def test_fragment_summary_docstring_example():
    actor = Fragment("actor").with_cell("step", "action = policy(obs)")
    assert actor.summary() == "actor: reads policy, obs → writes action · every step"


def test_fragment_summary_lists_rates_in_run_order_with_options():
    frag = (
        Fragment("env", replicas=4, device="gpu")
        .with_cell("step", "obs = envs.step(action)")
        .with_cell("init", "envs = make()\nobs = envs.reset()")
    )
    assert frag.summary() == (
        "env: reads make → writes envs, obs · once at init; reads action → writes obs · every step (4 replicas, on gpu)"
    )


def test_fragment_summary_with_nothing_read_or_written():
    frag = Fragment("noop").with_cell("iteration", "pass")
    assert frag.summary() == "noop: reads nothing → writes nothing · every iteration"


def test_ppo_summaries(ppo_fdg):
    assert ppo_fdg["actor"].summary() == (
        "actor: reads Net, cfg, weights → writes policy · once at init; "
        "reads obs, done → writes state, starts, action, logp, value · every step; "
        "reads weights → writes nothing · every iteration"
    )
    assert "FDG with 3 fragments" in repr(ppo_fdg)


def test_own_writes_are_not_external_inputs():
    frag = Fragment("learner").with_cell("init", "update = 0").with_cell("iteration", "update += 1\nw = f(b)")
    assert frag.cells["iteration"].inputs == ("update", "f", "b")
    assert frag.external_inputs("iteration") == ("f", "b")
    assert frag.external_inputs("step") == ()
    assert frag.writes_at("step") == ()
    assert frag.writes == ("update", "w")


def test_declared_reads_and_writes():
    frag = Fragment("env").with_cell("step", "exec(src)", reads=("action",), writes=("obs",))
    cell = frag.cells["step"]
    assert cell.inputs == ("src", "action")
    assert cell.writes == ("obs",)
    assert (cell.declared_reads, cell.declared_writes) == (("action",), ("obs",))


def test_declared_read_of_an_own_name_stays_external():
    frag = Fragment("env").with_cell("step", "obs = 1", reads=("obs",))
    assert frag.external_inputs("step") == ("obs",)


def test_runtime_name_replica_is_never_an_input():
    cell = Cell.from_code("env", "init", "n = cfg.n // replica.count")
    assert cell.inputs == ("cfg",)


def test_cell_line_of():
    cell = Cell.from_code("env", "step", "a = 1\nobj.obs = 2\nb = obs + 1\nobs2 = 3")
    assert cell.line_of("obs") == 3
    assert cell.line_of("a") == 1
    assert cell.line_of("missing") is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"replicas": 0}, r"fragment 'env': --replicas must be a whole number ≥ 1, got 0\."),
        ({"replicas": -2}, r"--replicas must be a whole number ≥ 1, got -2\."),
        ({"replicas": 1.5}, r"--replicas must be a whole number ≥ 1, got 1\.5\."),
        ({"device": "tpu"}, r"fragment 'env': --device must be one of cpu, gpu, got 'tpu'\."),
    ],
)
def test_fragment_option_validation(kwargs, message):
    with pytest.raises(FragmentOptionError, match=message) as info:
        Fragment("env", **kwargs)
    assert info.value.fragment == "env"


@pytest.mark.parametrize("name", ["class", "1env", "my-env", ""])
def test_fragment_name_must_be_an_identifier(name):
    with pytest.raises(FragmentOptionError, match=r"fragment name .* is not a Python identifier"):
        Fragment(name)


def test_unknown_rate():
    with pytest.raises(
        FragmentOptionError, match=r"fragment 'env': unknown rate 'often'; use --init or --every step\|iteration\."
    ):
        Fragment("env").with_cell("often", "x = 1")


def test_declared_names_must_be_identifiers():
    with pytest.raises(FragmentOptionError, match=r"fragment 'env': name '1x' is not a Python identifier\."):
        Fragment("env").with_cell("step", "x = 1", writes=("1x",))
    with pytest.raises(FragmentOptionError, match=r"name 'for' is not a Python identifier"):
        Fragment("env").with_cell("step", "x = 1", reads=("for",))


# ----------------------------------------------------------------------------- editing the FDG
def test_readding_a_cell_of_the_same_rate_replaces_it_cleanly():
    fdg = Graph()
    fdg.add_fragment("env", "obs = reset()", rate="init")
    fdg.add_fragment("env", "obs, reward = step(action)", rate="step")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("learner", "w = learn(reward)")
    assert {(e.name, e.consumer) for e in fdg.interfaces} == {
        ("action", "env"),
        ("obs", "actor"),
        ("reward", "learner"),
    }

    fdg.add_fragment("env", "obs, gain = step(action)", rate="step")
    env = fdg["env"]
    assert env.rates == ("init", "step")
    assert env.cells["step"].code == "obs, gain = step(action)"
    assert env.writes == ("obs", "gain")
    assert "reward" not in fdg.writers()
    assert {(e.name, e.consumer) for e in fdg.interfaces} == {("action", "env"), ("obs", "actor")}
    assert fdg.notebook_names() == ["reset", "step", "pick", "learn", "reward"]


def test_adding_another_rate_keeps_the_first():
    fdg = Graph()
    fdg.add_fragment("env", "obs = step(action)", rate="step")
    fdg.add_fragment("env", "obs = reset()", rate="init")
    assert fdg["env"].rates == ("init", "step")
    assert fdg["env"].cells["step"].code == "obs = step(action)"


def test_options_persist_across_cells_unless_given_again():
    fdg = Graph()
    fdg.add_fragment("env", "obs = reset()", rate="init", replicas=4, device="gpu")
    frag = fdg.add_fragment("env", "obs = step(a)", rate="step")
    assert (frag.replicas, frag.device) == (4, "gpu")
    frag = fdg.add_fragment("env", "obs = step(a)", rate="step", replicas=2, device="cpu")
    assert (frag.replicas, frag.device) == (2, "cpu")


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"replicas": 0}, FragmentOptionError, r"fragment 'env': --replicas must be a whole number ≥ 1, got 0\."),
        ({"device": "tpu"}, FragmentOptionError, r"--device must be one of cpu, gpu, got 'tpu'"),
        ({"rate": "often"}, FragmentOptionError, r"unknown rate 'often'"),
        ({"code": "x = (\n"}, FragmentSyntaxError, r"fragment 'env': syntax error at cell line 1"),
        ({"code": "reward = 1", "name": "actor"}, ConflictingWritersError, r"'reward' is written by"),
    ],
)
def test_a_rejected_add_leaves_the_fdg_unchanged(ppo_fdg, kwargs, exc, message):
    before = ppo_fdg.copy()
    assert before == ppo_fdg
    call = {"name": "env", "code": "obs = 1", "rate": "step", **kwargs}
    with pytest.raises(exc, match=message):
        ppo_fdg.add_fragment(call.pop("name"), call.pop("code"), **call)
    assert ppo_fdg == before
    assert ppo_fdg.interfaces == before.interfaces


def test_copy_is_independent(ppo_fdg):
    clone = ppo_fdg.copy()
    clone.add_fragment("buffer", "kept = obs", rate="step")
    assert "buffer" in clone and "buffer" not in ppo_fdg
    assert clone != ppo_fdg
    assert ppo_fdg != "not an fdg"


def test_fragments_mapping_is_a_copy(ppo_fdg):
    ppo_fdg.fragments.pop("env")
    assert "env" in ppo_fdg and len(ppo_fdg) == 3


def test_remove_and_clear(ppo_fdg):
    ppo_fdg.remove_fragment("learner")
    assert "learner" not in ppo_fdg and len(ppo_fdg) == 2
    with pytest.raises(FDGError, match=r"no fragment named 'learner'; fragments are: 'env', 'actor'\."):
        ppo_fdg.remove_fragment("learner")
    ppo_fdg.clear()
    assert len(ppo_fdg) == 0


def test_unknown_fragment_lookup(ppo_fdg):
    with pytest.raises(FDGError, match=r"no fragment named 'critic'; fragments are: 'env', 'learner', 'actor'\."):
        ppo_fdg["critic"]
    with pytest.raises(FDGError, match=r"no fragment named 'x'; fragments are: none yet\."):
        Graph()["x"]


def test_construct_from_fragments():
    env = Fragment("env").with_cell("step", "obs = f(action)")
    actor = Fragment("actor").with_cell(
        "step",
        "action = g(obs)",
    )
    fdg = Graph([env, actor])
    assert list(fdg.fragments) == ["env", "actor"]
    assert fdg["env"] is env


# ----------------------------------------------------------------------------- the PPO graph
def test_ppo_interfaces(ppo_fdg):
    got = {(e.producer, e.name, e.consumer, e.consumer_rate, e.timing) for e in ppo_fdg.interfaces}
    expected = {(p, n, "learner", "iteration", "stacked") for p, n in STACKED} | {
        ("actor", "action", "env", "step", "per-step"),
        ("env", "obs", "actor", "step", "per-step"),
        ("env", "done", "actor", "step", "per-step"),
        ("learner", "weights", "actor", "init", "once"),
        ("learner", "weights", "actor", "iteration", "per-iteration"),
    }
    assert got == expected
    assert edge(ppo_fdg, "env", "obs", "actor", "step").producer_rates == ("init", "step")
    assert edge(ppo_fdg, "learner", "weights", "actor", "init").producer_rates == ("init", "iteration")


def test_ppo_schedule(ppo_fdg, notebook_ns):
    expected = Schedule(
        init_order=("env", "learner", "actor"), step_order=("actor", "env"), iteration_order=("learner", "actor")
    )
    assert ppo_fdg.validate(notebook_ns) == expected
    assert ppo_fdg.validate() == expected
    assert ppo_fdg.schedule().order("step") == ("actor", "env")
    assert ppo_fdg.schedule().order("init") == ("env", "learner", "actor")


def test_notebook_names(ppo_fdg):
    assert ppo_fdg.notebook_names() == list(NOTEBOOK_NAMES)
    assert Graph().notebook_names() == []


def test_writers(ppo_fdg):
    writers = ppo_fdg.writers()
    assert writers["obs"] == ["env"]
    assert writers["weights"] == ["learner"]
    assert writers["policy"] == ["actor"]


def test_fdg_docstring_example():
    fdg = Graph()
    fdg.add_fragment("env", "obs = reset()", rate="init")
    fdg.add_fragment("actor", "action = choose(obs)", rate="step")
    fdg.add_fragment("env", "obs, reward = step(action)", rate="step")
    assert [i.describe() for i in fdg.interfaces] == [
        "actor → env: action (every step)",
        "env → actor: obs (every step)",
    ]
    assert fdg.schedule().step_order == ("actor", "env")


# ----------------------------------------------------------------------------- known bugs
def test_init_cell_ring_is_rejected():
    fdg = Graph()
    fdg.add_fragment("a", "x = f(y)", rate="init")
    fdg.add_fragment("b", "y = f(x)", rate="init")
    with pytest.raises(FDGError):
        fdg.validate({"f": 1})


# ----------------------------------------------------------------------------- the real PPO module
def test_ppo_module_builds_the_same_shape():
    """One test imports the real algorithm (it pulls in torch): same fragments, edges, schedule."""
    pytest.importorskip("torch")
    from workbench.algorithms import ppo

    fdg = ppo.build_fdg()
    ours = build_ppo_fdg()
    assert list(fdg.fragments) == list(ours.fragments)
    for name in fdg.fragments:
        assert fdg[name].rates == ours[name].rates
    shape = lambda g: {(e.producer, e.name, e.consumer, e.consumer_rate, e.timing) for e in g.interfaces}
    # the real learner also reads what bootstraps a time limit (cfg.bootstrap_truncated)
    bootstrap = {("env", name, "learner", "iteration", "stacked") for name in ("terminated", "truncated", "final_obs")}
    assert shape(fdg) == shape(ours) | bootstrap
    assert fdg.validate(vars(ppo)) == ours.validate()


def test_step_cell_reading_a_per_iteration_value_needs_a_first_value():
    fdg = Graph()
    fdg.add_fragment("learner", "weights = learn()")
    fdg.add_fragment("actor", "action = act(weights)", rate="step")
    with pytest.raises(
        FDGError,
        match=r"actor's step cell reads 'weights', which learner writes only "
        r"every iteration.*first value in learner's --init cell",
    ):
        fdg.validate()
