"""Distribution policies, the plans made from them, their checks and sizes (all pure data)."""

from __future__ import annotations

import json

import pytest

from workbench.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.plan import Route, make_plan
from workbench.fdg.policy import (
    IN_PROCESS,
    PRESETS,
    Group,
    Inline,
    Policy,
    SingleLearnerCoarse,
    SingleLearnerFine,
    as_policy_spec,
    needs_cluster,
    resolve_policy,
)
from workbench.fdg.wiring import wire

from .conftest import STACKED, make_inventory

ACTING = ("actor", "env")


def coarse(fdg, n=2, **kwargs):
    return SingleLearnerCoarse(**kwargs).place(fdg, make_inventory(n))


# ----------------------------------------------------------------------------- inventory
def test_inventory_lookup():
    inv = make_inventory(3, gpu_at=1)
    assert inv.names == ("w0", "w1", "w2") and len(inv) == 3
    assert inv.find("w2").address == "tcp://10.0.0.2:4000"
    assert inv.find("tcp://10.0.0.1:4000").name == "w1"
    assert inv.find("nope") is None
    assert [w.name for w in inv.gpu_workers()] == ["w1"]


# ----------------------------------------------------------------------------- presets
def test_inline_places_everything_in_process(ppo_fdg):
    policy = Inline().place(ppo_fdg)
    assert policy == Policy("inline", (Group(("env", "learner", "actor"), 1, (IN_PROCESS,)),))
    assert policy.in_process
    assert repr(policy) == "Policy('inline', env+learner+actor ×1 on local)"
    policy.check(ppo_fdg, make_inventory(0))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_single_learner_coarse_on_cpu_workers(ppo_fdg, n):
    policy = coarse(ppo_fdg, n)
    workers = tuple(f"w{i}" for i in range(n))
    assert policy == Policy(
        "SingleLearnerCoarse",
        (
            Group(ACTING, n, workers, "cpu"),
            Group(("learner",), 1, ("w0",), "cpu"),
        ),
    )
    assert not policy.in_process
    policy.check(ppo_fdg, make_inventory(n))


def test_single_learner_coarse_repr(ppo_fdg):
    assert repr(coarse(ppo_fdg, 2)) == "Policy('SingleLearnerCoarse', actor+env ×2 on w0, w1 | learner ×1 on w0)"


@pytest.mark.parametrize("gpu_at", [0, 2])
def test_single_learner_coarse_puts_the_learner_on_a_gpu(ppo_fdg, gpu_at):
    policy = SingleLearnerCoarse().place(ppo_fdg, make_inventory(3, gpu_at=gpu_at))
    acting, learning = policy.groups
    assert acting == Group(ACTING, 3, ("w0", "w1", "w2"), "cpu")
    assert learning == Group(("learner",), 1, (f"w{gpu_at}",), "gpu")


def test_single_learner_coarse_actors_parameter(ppo_fdg):
    policy = coarse(ppo_fdg, 2, actors=5)
    assert policy.groups[0] == Group(ACTING, 5, ("w0", "w1", "w0", "w1", "w0"))
    assert coarse(ppo_fdg, 3, actors=1).groups[0] == Group(ACTING, 1, ("w0",))


def test_single_learner_coarse_without_a_learner():
    fdg = Graph()
    fdg.add_fragment("env", "obs = reset()", rate="init")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = step(action)", rate="step")
    policy = coarse(fdg, 2)
    assert policy.groups == (Group(ACTING, 2, ("w0", "w1")),)


@pytest.mark.parametrize("actors", [0, -1, 1.5, "2", True])
@pytest.mark.parametrize("preset", ["SingleLearnerCoarse", "Async"])
def test_single_learner_coarse_rejects_bad_actor_counts(actors, preset):
    import workbench.fdg.policy as presets

    with pytest.raises(PlacementError, match=rf"^{preset}\(actors=…\) must be a whole number ≥ 1, got"):
        getattr(presets, preset)(actors=actors)


def test_single_learner_coarse_needs_step_fragments():
    fdg = Graph()
    fdg.add_fragment("learner", "w = 1")
    with pytest.raises(
        PlacementError,
        match=r"replicates the fragments that have step cells, and this FDG "
        r"has none; use the inline policy\.",
    ):
        coarse(fdg, 2)


def test_single_learner_coarse_needs_workers(ppo_fdg):
    with pytest.raises(PlacementError, match=r"SingleLearnerCoarse needs a cluster with at least one worker\."):
        SingleLearnerCoarse().place(ppo_fdg, Inventory(()))


def test_policy_docstring_example():
    fdg = Graph()
    fdg.add_fragment("env", "obs = make()", rate="init")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = advance(action)", rate="step")
    fdg.add_fragment("learner", "w = learn(obs, action)", rate="iteration")
    inv = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1")))
    assert repr(SingleLearnerCoarse().place(fdg, inv)) == (
        "Policy('SingleLearnerCoarse', actor+env ×2 on w0, w1 | learner ×1 on w0)"
    )


# ----------------------------------------------------------------------------- resolve_policy
def test_resolve_policy_by_name_preset_and_object(ppo_fdg):
    inv = make_inventory(2)
    assert resolve_policy("inline", ppo_fdg, None) == Inline().place(ppo_fdg)
    assert resolve_policy("coarse", ppo_fdg, inv) == coarse(ppo_fdg, 2)
    assert resolve_policy("SingleLearnerCoarse", ppo_fdg, inv) == coarse(ppo_fdg, 2)
    assert resolve_policy(SingleLearnerCoarse(actors=3), ppo_fdg, inv) == coarse(ppo_fdg, 2, actors=3)
    p = coarse(ppo_fdg, 2)
    assert resolve_policy(p, ppo_fdg, inv) is p
    assert set(PRESETS) == {
        "inline",
        "coarse",
        "SingleLearnerCoarse",
        "fine",
        "SingleLearnerFine",
        "multilearner",
        "MultiLearner",
        "gpuonly",
        "GPUOnly",
        "async",
        "Async",
        "pipelined",
        "Pipelined",
    }


def test_resolve_policy_unknown_name(ppo_fdg):
    with pytest.raises(
        PlacementError,
        match=r"unknown policy 'sideways'; choose one of inline, coarse, "
        r"SingleLearnerCoarse, fine",
    ):
        resolve_policy("sideways", ppo_fdg, None)


def test_resolve_policy_from_a_json_file(ppo_fdg, tmp_path):
    policy = coarse(ppo_fdg, 2)
    path = tmp_path / "placement.json"
    path.write_text(policy.to_json())
    assert as_policy_spec(str(path)) == policy
    assert resolve_policy(str(path), ppo_fdg, make_inventory(2)) == policy
    with pytest.raises(PlacementError, match=r"policy file not found: '.*missing\.json'\."):
        as_policy_spec(str(tmp_path / "missing.json"))
    path.write_text("{oops")
    with pytest.raises(PlacementError, match=r"policy JSON is malformed"):
        as_policy_spec(str(path))


def test_needs_cluster(ppo_fdg):
    assert not needs_cluster("inline")
    assert not needs_cluster(Inline())
    assert not needs_cluster(Inline().place(ppo_fdg))
    assert needs_cluster("coarse")
    assert needs_cluster(SingleLearnerCoarse(actors=2))
    assert needs_cluster(coarse(ppo_fdg, 1))
    assert not needs_cluster(Policy("p", (Group(ACTING, 2, (IN_PROCESS, IN_PROCESS)),)))


def test_resolve_policy_checks_workers(ppo_fdg):
    with pytest.raises(PlacementError, match=r"worker 'w1', which is not in the cluster"):
        resolve_policy(coarse(ppo_fdg, 2), ppo_fdg, make_inventory(1))


# ----------------------------------------------------------------------------- Policy.check / Group
def test_check_unplaced_fragment(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 2),))
    with pytest.raises(PlacementError, match=r"policy 'p' does not place fragment 'learner'; add it to a group\."):
        policy.check(ppo_fdg)


def test_check_unknown_fragment(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 2), Group(("learner", "critic"), 1)))
    with pytest.raises(
        PlacementError,
        match=r"policy 'p' places fragment 'critic', which the FDG does not have "
        r"\(fragments: env, learner, actor\)\.",
    ):
        policy.check(ppo_fdg)


def test_check_fragment_in_two_groups(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 2), Group(("learner", "actor"), 1)))
    with pytest.raises(PlacementError, match=r"policy 'p' places actor in two groups\."):
        policy.check(ppo_fdg)


def test_check_unknown_worker(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 2, ("w0", "w9")), Group(("learner",), 1, (IN_PROCESS,))))
    policy.check(ppo_fdg)  # no inventory: workers are not checked
    with pytest.raises(
        PlacementError,
        match=r"policy 'p' puts 'actor\+env' on worker 'w9', which is not in "
        r"the cluster .*\(workers now: w0, w1\)\.",
    ):
        policy.check(ppo_fdg, make_inventory(2))
    with pytest.raises(PlacementError, match=r"\(workers now: none\)"):
        policy.check(ppo_fdg, make_inventory(0))


def test_check_accepts_worker_addresses(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 1, ("tcp://10.0.0.1:4000",)), Group(("learner",), 1, ("w0",))))
    policy.check(ppo_fdg, make_inventory(2))


def test_group_of(ppo_fdg):
    policy = coarse(ppo_fdg, 2)
    assert policy.group_of("env").name == "actor+env"
    with pytest.raises(PlacementError, match=r"does not place fragment 'critic'"):
        policy.group_of("critic")


@pytest.mark.parametrize("replicas", [0, -1, 1.0, "2"])
def test_group_rejects_bad_replica_counts(replicas):
    with pytest.raises(PlacementError, match=r"group 'actor\+env': replicas must be a whole number ≥ 1, got"):
        Group(ACTING, replicas)


def test_group_worker_count_must_match_replicas():
    with pytest.raises(
        PlacementError,
        match=r"group 'actor\+env': 3 replicas but 2 workers \(w0, w1\); "
        r"give one worker per replica\.",
    ):
        Group(ACTING, 3, ("w0", "w1"))
    assert Group(ACTING, 3).workers == ()  # no workers: unplaced is fine


def test_group_name_and_dict():
    g = Group(ACTING, 2, ("w0", "w1"), "gpu")
    assert g.name == "actor+env"
    assert g.to_dict() == {"fragments": ["actor", "env"], "replicas": 2, "workers": ["w0", "w1"], "device": "gpu"}


# ----------------------------------------------------------------------------- JSON
@pytest.mark.parametrize(
    "make",
    [
        lambda fdg: Inline().place(fdg),
        lambda fdg: coarse(fdg, 3),
        lambda fdg: SingleLearnerCoarse(actors=4).place(fdg, make_inventory(2, gpu_at=1)),
        lambda fdg: Policy("custom", (Group(("actor", "env", "learner"), 2),)),
        lambda fdg: Policy("empty"),
    ],
)
def test_policy_json_round_trip(ppo_fdg, make):
    policy = make(ppo_fdg)
    text = policy.to_json()
    json.loads(text)
    assert Policy.from_json(text) == policy


def test_policy_from_minimal_json():
    policy = Policy.from_json('{"groups": [{"fragments": ["actor", "env"]}]}')
    assert policy == Policy("custom", (Group(ACTING, 1, (), "cpu"),))


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "{",
        "{}",
        '{"groups": null}',
        "[1, 2]",
        '{"groups": [{"replicas": 2}]}',
        '{"groups": [{"fragments": ["a"], "replicas": "two"}]}',
        '{"groups": [{"fragments": ["a"], "replicas": null}]}',
    ],
)
def test_policy_from_malformed_json(text):
    with pytest.raises(PlacementError, match=r"policy JSON is malformed \(.*\); expected \{\"name\": …"):
        Policy.from_json(text)


def test_policy_from_json_with_invalid_group():
    with pytest.raises(PlacementError, match=r"replicas must be a whole number ≥ 1, got 0"):
        Policy.from_json('{"groups": [{"fragments": ["a"], "replicas": 0}]}')
    with pytest.raises(PlacementError, match=r"2 replicas but 1 workers"):
        Policy.from_json('{"groups": [{"fragments": ["a"], "replicas": 2, "workers": ["w0"]}]}')


def test_policy_from_json_rejects_string_fragments():
    with pytest.raises(PlacementError, match="malformed"):
        Policy.from_json('{"groups": [{"fragments": "learner"}]}')


# ----------------------------------------------------------------------------- make_plan
def test_inline_plan_has_no_routes(ppo_fdg):
    plan = make_plan(ppo_fdg, Inline().place(ppo_fdg))
    assert plan.routes == ()
    group = "env+learner+actor"
    assert set(plan.groups) == {group}
    assert plan.local_interfaces(group) == ppo_fdg.interfaces
    assert plan.routes_into(group) == [] and plan.routes_out_of(group) == []
    assert "nothing crosses processes" in plan.explain()


def test_coarse_plan_routes(ppo_fdg):
    plan = make_plan(ppo_fdg, coarse(ppo_fdg, 2))
    assert plan.schedule == ppo_fdg.schedule()
    got = {
        (
            r.interface.producer,
            r.interface.name,
            r.interface.consumer_rate,
            r.spatial,
            r.key,
            r.batch_axis,
            r.producer_group,
            r.consumer_group,
        )
        for r in plan.routes
    }
    expected = {(p, n, "iteration", "gather", f"stacked:{p}.{n}", 1, "actor+env", "learner") for p, n in STACKED}
    expected |= {
        ("learner", "weights", "init", "broadcast", "learner.weights", 0, "learner", "actor+env"),
        ("learner", "weights", "iteration", "broadcast", "learner.weights", 0, "learner", "actor+env"),
    }
    assert got == expected
    # the per-step actor <-> env traffic stays inside the fused group
    local = {(e.name, e.consumer) for e in plan.local_interfaces("actor+env")}
    assert local == {("action", "env"), ("obs", "actor"), ("done", "actor")}
    assert plan.local_interfaces("learner") == []
    assert len(plan.routes_into("learner")) == 8 and len(plan.routes_out_of("learner")) == 2
    assert plan.group_of("env") is plan.groups["actor+env"]
    assert plan.stacked_names("env") == ("reward", "obs", "done")
    assert plan.stacked_names("actor") == ("state", "action", "logp", "value", "starts")
    assert plan.stacked_names("learner") == ()


def test_coarse_plan_explain(ppo_fdg):
    text = make_plan(ppo_fdg, SingleLearnerCoarse().place(ppo_fdg, make_inventory(2, gpu_at=1))).explain()
    lines = text.splitlines()
    assert lines[0] == "plan for policy 'SingleLearnerCoarse':"
    assert "  actor+env ×2 on w0, w1 (cpu)" in lines
    assert "  learner ×1 on w1 (gpu)" in lines
    assert "  crossing processes:" in lines
    assert "    actor → learner: state (stacked [T, …] each iteration) [gather]" in lines
    assert "    learner → actor: weights (every iteration) [broadcast]" in lines
    assert "    learner → actor: weights (once, at init) [broadcast]" in lines
    assert repr(make_plan(ppo_fdg, coarse(ppo_fdg, 1))) == make_plan(ppo_fdg, coarse(ppo_fdg, 1)).explain()


def test_unplaced_group_is_explained_as_anywhere(ppo_fdg):
    plan = make_plan(ppo_fdg, Policy("p", (Group(ACTING, 2), Group(("learner",), 1))))
    assert "  actor+env ×2 on anywhere (cpu)" in plan.explain().splitlines()


def test_one_to_one_routes(ppo_fdg):
    plan = make_plan(ppo_fdg, Policy("p", (Group(ACTING, 3), Group(("learner",), 3))))
    assert {r.spatial for r in plan.routes} == {"one-to-one"}


def test_per_step_edges_across_groups_scatter_and_gather(ppo_fdg):
    policy = Policy("fine", (Group(("actor",), 1), Group(("env",), 2), Group(("learner",), 1)))
    plan = make_plan(ppo_fdg, policy)
    per_step = {(r.interface.name, r.spatial) for r in plan.routes if r.per_step}
    assert per_step == {("action", "scatter"), ("obs", "gather"), ("done", "gather")}
    assert all(r.key.startswith("step:") for r in plan.routes if r.per_step)
    # per-step values move inside the step blocks: tasks never wait for them
    for task in wire(plan, iterations=2):
        assert not any(i.key.startswith("step:") for i in task.inputs)


def test_incompatible_replica_counts_are_rejected(ppo_fdg):
    policy = Policy("p", (Group(ACTING, 2), Group(("learner",), 3)))
    with pytest.raises(
        PlacementError,
        match=r"actor → learner: state \(stacked \[T, …\] each iteration\): 2 "
        r"replicas of 'actor' cannot feed 3 replicas of 'learner'; use equal "
        r"counts or 1 on one side\.",
    ):
        make_plan(ppo_fdg, policy)


def test_make_plan_checks_the_policy(ppo_fdg):
    with pytest.raises(PlacementError, match=r"does not place fragment 'learner'"):
        make_plan(ppo_fdg, Policy("p", (Group(ACTING, 2),)))


def test_route_key_and_axis():
    from workbench.fdg.interface import Interface

    stacked = Route(Interface("obs", "env", ("init", "step"), "learner", "iteration"), "a", "b", "gather")
    latest = Route(Interface("w", "learner", ("iteration",), "actor", "step"), "b", "a", "broadcast")
    assert (stacked.key, stacked.batch_axis) == ("stacked:env.obs", 1)
    assert (latest.key, latest.batch_axis) == ("learner.w", 0)


# ----------------------------------------------------------------------------- placement checks and sizes
def test_gpu_placement_on_a_worker_without_gpu_is_refused(ppo_fdg):
    policy = Policy("p", (Group(tuple(ppo_fdg.fragments), 1, ("w0",), "gpu"),))
    with pytest.raises(PlacementError, match=r"on the GPU of worker 'w0', which has no GPU"):
        policy.check(ppo_fdg, make_inventory(2))


def test_a_worker_that_left_is_named(ppo_fdg):
    policy = coarse(ppo_fdg, 3)
    with pytest.raises(PlacementError, match=r"worker 'w2', which is not in the cluster — it may have left"):
        policy.check(ppo_fdg, make_inventory(2))


def test_fine_needs_a_per_step_boundary():
    fdg = Graph()
    fdg.add_fragment("env", "obs = 0", rate="init")
    fdg.add_fragment("env", "obs = obs + 1", rate="step")
    fdg.add_fragment("learner", "w = obs", rate="iteration")
    with pytest.raises(PlacementError, match="no per-step interface between them"):
        SingleLearnerFine().place(fdg, make_inventory(2))


def test_bytes_per_iteration_for_each_preset_without_a_cluster(ppo_fdg):
    """What crosses the wire each iteration, from value sizes (bytes for the whole batch)."""
    from workbench.fdg.policy import GPUOnly, MultiLearner

    sizes = {
        "state": 512,
        "action": 256,
        "logp": 128,
        "value": 128,
        "starts": 32,
        "reward": 128,
        "obs": 512,
        "done": 32,
        "weights": 10_000,
    }
    inv, T = make_inventory(2), 32
    stacked = T * (512 + 256 + 128 + 128 + 32 + 128 + 512 + 32)
    coarse_plan = make_plan(ppo_fdg, coarse(ppo_fdg, 2))
    assert sum(coarse_plan.traffic(sizes, T).values()) == stacked + 2 * 10_000  # weights to 2 actors
    fine = make_plan(ppo_fdg, SingleLearnerFine().place(ppo_fdg, inv))
    per_step = T * (256 + 512 + 32)  # action out, obs and done back, every step
    assert sum(fine.traffic(sizes, T).values()) == per_step + T * (128 + 512 + 32)  # + env's stacked data
    assert "weights" not in {r.interface.name for r in fine.routes}  # no weights on the wire
    for preset in (MultiLearner(), GPUOnly()):
        assert make_plan(ppo_fdg, preset.place(ppo_fdg, inv)).traffic(sizes, T) == {}
    text = coarse_plan.explain(sizes, T)
    assert "on the wire per iteration: at most" in text and "weights (every iteration) [broadcast, 19.5 KiB" in text


# ----------------------------------------------------------------------------- cell options
def test_cell_options_a_policy_does_not_give_are_reported_not_dropped():
    """`%%fragment env --replicas 100000` and `--device gpu` used to be echoed, then ignored
    by every preset without a word; now the plan says so (and warns) under every policy
    that does not give them, and says nothing where they are given."""
    from workbench.fdg.plan import OverriddenOptionWarning

    fdg = Graph()
    fdg.add_fragment("env", "obs = 0", rate="init", replicas=100000)
    fdg.add_fragment("actor", "action = obs", rate="step")
    fdg.add_fragment("env", "obs = action", rate="step")
    fdg.add_fragment("learner", "w = obs.sum()", rate="iteration", device="gpu")
    inventory = make_inventory(2)  # no GPUs
    for preset in ("inline", "coarse", "fine", "gpuonly"):
        policy = resolve_policy(preset, fdg, inventory)
        with pytest.warns(OverriddenOptionWarning) as caught:
            plan = make_plan(fdg, policy)
        said = [str(w.message) for w in caught]
        assert any("fragment 'env' asks for --replicas 100000" in m and "place by hand" in m for m in said), preset
        assert any("fragment 'learner' asks for --device gpu" in m and "the CPU" in m for m in said), preset
        assert all(f"WARNING: {m}" in plan.explain() for m in said)
    given = Policy("mine", (Group(("env", "actor"), 2, ("0", "1")), Group(("learner",), 1, ("0",))))
    fdg.add_fragment("env", "obs = 0", rate="init", replicas=2)  # what this policy gives
    fdg.add_fragment("learner", "w = obs.sum()", rate="iteration", device="cpu")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", OverriddenOptionWarning)
        assert make_plan(fdg, given).warnings == []


def test_a_value_first_written_after_warm_up_is_not_shown_as_0_bytes(ppo_fdg):
    """A learner that sends weights only after a warm-up has none in the one-iteration
    probe: its size is unknown, and the plan says so instead of '0 B/iteration'."""
    sizes = {
        "state": 512,
        "action": 256,
        "logp": 128,
        "value": 128,
        "starts": 32,
        "reward": 128,
        "obs": 512,
        "done": 32,
    }  # no "weights": not written in the first iteration
    text = make_plan(ppo_fdg, coarse(ppo_fdg, 2)).explain(sizes, 32)
    assert "weights (every iteration) [broadcast, size not measured: not written in the first iteration]" in text
    assert "on the wire per iteration: at least" in text and "(plus weights, written only after" in text
    assert "weights (every iteration) [broadcast, 0 B" not in text


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8, 16, 32])
@pytest.mark.parametrize("per_worker", [None, 1, 2])
def test_fine_never_doubles_env_replicas_on_a_worker_while_another_has_fewer(ppo_fdg, workers, per_worker):
    """Env replicas of one process take turns (one cell at a time), so a worker with two
    makes every step last two env steps: envs=W on W workers put two on one worker (and
    none beside the learner) and ran at 52 % of W × the 1-worker rate, at every W ≥ 2."""
    from collections import Counter

    inv = make_inventory(workers)
    envs = None if per_worker is None else per_worker * workers
    policy = SingleLearnerFine(envs=envs).place(ppo_fdg, inv)
    learner, env = policy.groups
    home = learner.workers[0]
    load = Counter(env.workers)
    assert max(load.values()) - min(load[w] for w in inv.names) <= 1  # as even as it gets
    if env.replicas < workers:  # up to one per other worker: the other workers alone
        assert home not in load and max(load.values()) == 1
    if env.replicas == workers:  # one each, one beside the learner
        assert set(load.values()) == {1} and load[home] == 1


def test_fragments_without_a_device_option_are_not_warned_about_on_a_gpu(ppo_fdg):
    """Every fragment is "cpu" unless its cell says --device gpu; GPUOnly on a GPU worker
    used to warn that each of the quickstart's fragments 'asks for --device cpu'."""
    import warnings

    from workbench.fdg.plan import OverriddenOptionWarning

    policy = resolve_policy("gpuonly", ppo_fdg, make_inventory(2, gpu_at=1))
    assert policy.groups[0].device == "gpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverriddenOptionWarning)
        assert make_plan(ppo_fdg, policy).warnings == []


def test_counts_computed_with_numpy_are_whole_numbers_and_bools_are_not():
    """A budget computed with NumPy (``np.int64``) is a count like any other, and is kept
    as a plain int (a policy's JSON takes it); a bool, NumPy's too, 2.0 and "2" are refused."""
    import numpy as np

    from workbench.fdg.errors import FragmentOptionError
    from workbench.fdg.fragment import Fragment
    from workbench.fdg.policy import Group, MultiLearner, Policy, SingleLearnerCoarse, SingleLearnerFine

    made = [
        SingleLearnerCoarse(actors=np.int64(3), lag=np.int32(1)).actors,
        SingleLearnerFine(envs=np.int64(2)).envs,
        MultiLearner(learners=np.int16(2)).learners,
        Group(("actor",), np.int64(2)).replicas,
        Policy("p", (Group(("actor",), 1),), lag=np.int64(1)).lag,
        Fragment("env", replicas=np.int64(2)).replicas,
    ]
    assert made == [3, 2, 2, 2, 1, 2] and all(type(n) is int for n in made)
    assert (
        json.loads(json.dumps(Policy("p", (Group(("actor",), np.int64(2)),)).to_dict()))["groups"][0]["replicas"] == 2
    )
    for bad in (True, np.bool_(True), 2.0, "2"):
        with pytest.raises(PlacementError, match="must be a whole number"):
            SingleLearnerCoarse(actors=bad)
        with pytest.raises(PlacementError, match="must be a whole number"):
            Group(("actor",), bad)
    with pytest.raises(FragmentOptionError, match="--replicas must be a whole number"):
        Fragment("env", replicas=True)
