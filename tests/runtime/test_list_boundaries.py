"""Python lists across a fragment boundary follow one rule under every policy
(docs/boundaries.md): a list is taken item by item, as a tuple is — numbers and strings in
it are the one value when every replica wrote the same and an error when they differ, an
array with a batch axis in it joins along that axis.

Before, a per-step ``limits = [-1.0, 1.0]`` read once per iteration was stacked to
``[T, 2]`` and then joined along axis 1 as if it were a batch: the learner saw ``(3, 2)``
inline, ``(3, 4)`` under coarse with 2 actors, ``(3, 8)`` with 4, and a list that differed
between replicas was joined silently; ``{"x": [np.arange(n)]}`` arrived ``(3, 1, 4)``
inline and ``(3, 2, 2)`` under coarse."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.values.arrays import ReplicasDisagree, gather, lists_marked, stack, unwrapped
from workbench.runtime.values.scatter import split

from tests.runtime.test_boundaries import SIGNATURE, N, T, saw  # the same battery's tools


def _fdg(limits: str = "[-1.0, 1.0]") -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "N": N})
    fdg.add_fragment(
        "env",
        (
            "n = N // replica.count\n"
            "rows = np.arange(replica.index * n, (replica.index + 1) * n)\n"
            "obs = rows.astype(float)\n"
            "names = ['a', 'b']\n"  # at init, read by the learner
            "it_list = [1, 2.5]\n"
            "lim = [0.5, 'x', None]\n"  # the first values of what the actor reads every step
            "held = [rows * 2]\n"
        ),
        rate="init",
    )
    fdg.add_fragment("actor", SIGNATURE, rate="init")
    fdg.add_fragment(
        "actor",
        (
            "if not seen:\n"  # the first step's
            "    seen.append(repr(sig(('step', lim, held))))\n"
            "action = np.zeros(obs.shape[0])\n"
        ),
        rate="step",
    )
    fdg.add_fragment(
        "env",
        (
            "obs = rows + action\n"
            "reward = np.ones(n)\n"
            f"limits = {limits}\n"
            "lim = [0.5, 'x', None]\n"  # read every step by the actor
            "held = [rows * 2]\n"  # a list holding a batch, every step
            "nested = {'x': [rows], 'y': 'same', 'z': ([1, 2], rows)}\n"
            "deep = [[rows, rows + 1]]\n"
        ),
        rate="step",
    )
    fdg.add_fragment("env", "it_list = [1, 2.5]\nit_held = [rows, 'k']", rate="iteration")
    fdg.add_fragment("learner", SIGNATURE, rate="init")
    fdg.add_fragment(
        "learner",
        (
            "seen.append(repr(sig(('init', names))))\n"
            "seen.append(repr(sig(('stacked', limits, lim, held, nested, deep))))\n"
            "seen.append(repr(sig(('iteration', it_list, it_held))))\n"
        ),
        rate="iteration",
    )
    return fdg


def _saw(policy, client) -> dict[str, list[list[str]]]:
    return saw(policy, client, _fdg)


@pytest.fixture(scope="module")
def inline_saw():
    return _saw("inline", None)


def test_inline_sees_the_lists_as_stacked_arrays(inline_saw):
    learner = inline_saw["learner"][0]
    stacked = eval(learner[1], {"__builtins__": {}})[1]
    assert stacked[1][:3] == ("ndarray", "float64", (T, 2))  # limits [T, 2]
    assert stacked[3][:3] == ("ndarray", "int64", (T, 1, N))  # held: the batch inside, all N rows
    assert stacked[4]["x"][:3] == ("ndarray", "int64", (T, 1, N))
    assert stacked[5][:3] == ("ndarray", "int64", (T, 1, 2, N))
    iteration = eval(learner[2], {"__builtins__": {}})[1]
    assert iteration[1] == ("list", [("int", 1), ("float", 2.5)])


FINE = wb.SingleLearnerFine(envs=2)


@pytest.mark.parametrize(
    "policy",
    ["coarse", wb.SingleLearnerCoarse(actors=4), FINE, "gpuonly"],
    ids=["coarse", "coarse4", "fine", "gpuonly"],
)
def test_the_learner_sees_the_lists_as_inline_does(client, inline_saw, policy):
    assert _saw(policy, client)["learner"] == inline_saw["learner"]


def test_an_actor_reading_lists_every_step_from_two_env_replicas_sees_them_as_inline_does(client, inline_saw):
    assert _saw(FINE, client)["actor"] == inline_saw["actor"]


@pytest.mark.parametrize(
    "policy", ["inline", "coarse", wb.SingleLearnerCoarse(actors=4)], ids=["inline", "coarse", "coarse4"]
)
def test_a_per_step_list_read_once_per_iteration_is_t_by_its_length(client, policy):
    """The outside tester's case: (3, 2) inline, and not (3, 4) or (3, 8) with 2 or 4 actors."""
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "n = 4 // replica.count", rate="init")
    fdg.add_fragment("env", "reward = np.ones(n, np.float32)\nlimits = [-1.0, 1.0]", rate="step")
    fdg.add_fragment("learner", "shape = np.shape(limits)\nkind = type(limits).__name__", rate="iteration")
    run = fdg.run(
        iterations=1,
        steps=T,
        policy=policy,
        progress=False,
        keep_state=True,
        **({} if policy == "inline" else {"cluster": client}),
    )
    learner = run.state.fragments["learner"][0]
    assert (learner["shape"], learner["kind"]) == ((T, 2), "ndarray")


@pytest.mark.parametrize("policy", ["coarse", FINE], ids=["coarse", "fine"])
def test_a_list_that_differs_between_replicas_is_the_reader_s_error(client, policy):
    fdg = _fdg(limits="[float(replica.index), 1.0]")
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=T, policy=policy, cluster=client, progress=False)
    message = str(info.value)
    assert "'limits'" in message and "'learner'" in message, message
    assert "replica 0 wrote [0.0, 1.0] at step 0, replica 1 [1.0, 1.0]" in message, message


def test_gather_takes_lists_item_by_item():
    assert gather([[-1.0, 1.0], [-1.0, 1.0]]) == [-1.0, 1.0]
    assert gather([[np.nan, "a"], [np.nan, "a"]])[1] == "a"  # NaN equal to NaN, as a float's
    joined = gather([[np.arange(2), 5], [np.arange(2, 5), 5]])
    assert type(joined) is list and joined[0].tolist() == [0, 1, 2, 3, 4] and joined[1] == 5
    with pytest.raises(ReplicasDisagree) as info:
        gather([[0.0, 1.0], [1.0, 1.0]])
    assert info.value.part == "[0]" and str(info.value) == "replica 0 wrote 0.0, replica 1 1.0"
    with pytest.raises(ReplicasDisagree, match="a list of 2, replica 1 a list of 3"):
        gather([[1, 2], [1, 2, 3]])


def test_a_stacked_list_is_not_joined_as_a_batch():
    steps = [[-1.0, 1.0]] * T
    marked = lists_marked(stack(steps), steps[0])
    assert gather([marked, marked], axis=1).shape == (T, 2)
    assert unwrapped(marked).shape == (T, 2) and gather([marked], axis=1).shape == (T, 2)
    other = lists_marked(stack([[-1.0, 2.0]] * T), [-1.0, 2.0])
    with pytest.raises(ReplicasDisagree, match=r"replica 0 wrote \[-1.0, 1.0\] at step 0, replica 1 \[-1.0, 2.0\]"):
        gather([marked, other], axis=1)
    parts = [{"x": [np.arange(2 * r, 2 * r + 2)], "t": (np.ones(2), 3)} for r in range(2)]
    values = [lists_marked(stack([p] * T), p) for p in parts]
    out = gather(values, axis=1)
    assert out["x"].shape == (T, 1, 4) and out["x"][0, 0].tolist() == [0, 1, 2, 3]
    assert out["t"][0].shape == (T, 4) and out["t"][1].shape == (T,)
    # arrays, numbers and dicts of them pass unmarked, as before
    plain = stack([{"a": np.zeros(2), "b": 1.0}] * T)
    assert lists_marked(plain, {"a": np.zeros(2), "b": 1.0}) is plain


def test_a_list_scattered_is_split_item_by_item():
    pieces = split([np.arange(4), 1.0, "s"], 2)
    assert [p[0].tolist() for p in pieces] == [[0, 1], [2, 3]]
    assert [p[1:] for p in pieces] == [[1.0, "s"], [1.0, "s"]] and all(type(p) is list for p in pieces)
