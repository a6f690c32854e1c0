"""What a cell reads across a fragment boundary is the same value, type and shape under
every placement (docs/boundaries.md): a battery of value kinds (numbers, bools, None,
strings, 0-d and batch arrays, torch tensors, tuples, dicts) at every rate (init, per
step → stacked, per iteration), from an env replicated 1–2 times, read by a learner that
is one replica under inline, coarse, fine and gpuonly, and by the actor where it is one
replica too (inline, fine, gpuonly: under coarse each actor replica reads its own env's
share, by design).

Before, coarse turned ``obs_dim = 4`` into ``[4, 4]``, ``None`` into ``[None, None]`` and a
bool into a list (``if [False, False]:`` is true)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.errors import FragmentRuntimeError

N, T = 4, 3  # envs over all replicas; steps per iteration

SIGNATURE = '''
def sig(x):
    """type, dtype, shape and content, recursively: what a comparison across policies needs"""
    if isinstance(x, dict):
        return {k: sig(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x).__name__, [sig(v) for v in x]
    if hasattr(x, "shape"):
        return type(x).__name__, str(x.dtype), tuple(x.shape), np.asarray(x).tolist()
    return type(x).__name__, x
seen = []
'''


def battery_fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb, "N": N})
    fdg.add_fragment(
        "env",
        (
            "n = N // replica.count\n"
            "rows = np.arange(replica.index * n, (replica.index + 1) * n)\n"
            "obs_dim = 4\n"  # the same on every replica: passed on as it is
            "flag = False\n"
            "nothing = None\n"
            "label = 'cartpole'\n"
            "half = np.array(0.5)\n"
            "batch = rows.astype(np.float32)\n"  # each replica's share of the batch: joined
            "tbatch = torch.as_tensor(rows)\n"
            "pair = (rows * 2, 3)\n"
            "info = {'rows': rows, 'k': 7, 'none': None}\n"
            "obs = rows.astype(float)\n"
            "t = 0\n"
        ),
        rate="init",
    )
    fdg.add_fragment("actor", SIGNATURE, rate="init")
    fdg.add_fragment(
        "actor",
        (
            "seen.append(repr(sig(('step', obs, flag, obs_dim))))\n"
            "action = np.zeros(obs.shape[0])\n"
            "go = True\n"  # per step to every env replica (scattered under fine): whole
            "note = None\n"
        ),
        rate="step",
    )
    fdg.add_fragment(
        "env",
        (
            "t += 1\n"
            "obs = rows + t + action + (0 if go is True and note is None else 1000)\n"
            "reward = np.ones(n)\n"
            "done_all = False\n"
            "step_no = t\n"
            "stats = {'obs': obs, 't': t}\n"
        ),
        rate="step",
    )
    fdg.add_fragment("env", "it_batch = rows * 10\nit_scalar = 1.5\nit_none = None", rate="iteration")
    fdg.add_fragment("learner", SIGNATURE, rate="init")
    fdg.add_fragment(
        "learner",
        (
            "seen.append(repr(sig(('init', obs_dim, flag, nothing, label, half, batch, tbatch, pair, info))))\n"
            "seen.append(repr(sig(('stacked', obs, reward, done_all, step_no, stats))))\n"
            "seen.append(repr(sig(('iteration', it_batch, it_scalar, it_none))))\n"
        ),
        rate="iteration",
    )
    return fdg


def saw(policy, client, build=None, steps: int = T) -> dict[str, list[list[str]]]:
    """What the learner and actor replicas of ``build()`` (the battery here) recorded in
    ``seen`` over two iterations under ``policy``."""
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = (build or battery_fdg)().run(
        iterations=2, steps=steps, policy=policy, progress=False, keep_state=True, **kwargs
    )
    return {frag: [replica["seen"] for replica in run.state.fragments[frag]] for frag in ("learner", "actor")}


@pytest.fixture(scope="module")
def inline_saw(client):
    return saw("inline", client)


def test_inline_reads_what_the_rule_says(inline_saw):
    learner = inline_saw["learner"][0]
    assert len(learner) == 2 * 3
    init = eval(learner[0], {"__builtins__": {}})  # a repr of plain tuples, lists and numbers
    assert init[1][1:5] == [("int", 4), ("bool", False), ("NoneType", None), ("str", "cartpole")]
    assert init[1][6] == ("ndarray", "float32", (N,), [0.0, 1.0, 2.0, 3.0])
    stacked = eval(learner[1], {"__builtins__": {}})
    assert stacked[1][1][2] == (T, N)  # obs stacked [T, N]


FINE = wb.SingleLearnerFine(envs=2)  # two env replicas on two workers (the preset would make one)


@pytest.mark.parametrize("policy", ["coarse", FINE, "gpuonly"], ids=["coarse", "fine", "gpuonly"])
def test_the_learner_reads_the_same_under_every_policy(policy, client, inline_saw):
    assert saw(policy, client)["learner"] == inline_saw["learner"]


@pytest.mark.parametrize("policy", [FINE, "gpuonly"], ids=["fine", "gpuonly"])
def test_a_single_actor_reads_the_same_per_step(policy, client, inline_saw):
    assert saw(policy, client)["actor"] == inline_saw["actor"]


@pytest.mark.parametrize("policy", ["coarse", FINE], ids=["coarse", "fine"])
def test_replicas_that_disagree_on_a_value_without_a_batch_axis_are_an_error(policy, client):
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "obs = np.zeros(2)\nrank = replica.index", rate="init")
    fdg.add_fragment("actor", "action = obs", rate="step")
    fdg.add_fragment("env", "obs = obs + action", rate="step")
    fdg.add_fragment("learner", "r = rank", rate="iteration")
    fdg.run(iterations=1, steps=2, progress=False)  # one replica: nothing to disagree
    with pytest.raises(FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=2, policy=policy, cluster=client, progress=False)
    message = str(info.value)
    assert "fragment 'learner'" in message and "'rank'" in message and "fragment 'env'" in message
    assert "replica 0 wrote 0, replica 1 1" in message and "rank = np.array([rank])" in message
    assert fdg.fragments["learner"].cells["iteration"].code == "r = rank"  # the FDG is intact


@pytest.mark.parametrize("rate", ["step", "iteration"])
@pytest.mark.parametrize("kind", ["np.zeros", "torch.zeros"])
def test_replicas_whose_arrays_cannot_be_joined_are_an_error_naming_both_shapes(kind, rate, client):
    """Arrays are joined along their batch axis: every other axis must match. One replica
    per size here (``2 + replica.index`` columns): the reader's error, not NumPy's."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("actor", "action = obs", rate="step")
    fdg.add_fragment("env", "obs = obs + action\nreward = np.ones(2)", rate="step")
    fdg.add_fragment("env", f"x = {kind}((2, 2 + replica.index))", rate=rate)
    fdg.add_fragment("learner", "shape = tuple(x.shape)", rate="iteration")
    with pytest.raises(FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=2, policy="coarse", cluster=client, progress=False)
    message = str(info.value)
    assert "fragment 'learner'" in message and "'x'" in message and "fragment 'env'" in message
    assert "replica 0 wrote" in message and "2, 2)" in message and "2, 3)" in message
    assert "joined along their batch axis" in message and "pad to a fixed size" in message


# -- the two exceptions, by design: a replicated learner and Async read a replica's share --------
def _share(inline: object, got: object, replica: int, count: int) -> bool:
    """``got`` is what inline read, cut to env replica ``replica``'s rows of ``count``: an
    array equal to inline's along every axis but the batch axis, where it holds that
    replica's slice; everything without a batch axis identical."""
    if (
        isinstance(inline, tuple)
        and len(inline) == 4
        and inline[0] in ("ndarray", "Tensor")
        and isinstance(got, tuple)
        and len(got) == 4
    ):
        if got[:2] != inline[:2] or len(got[2]) != len(inline[2]):
            return False
        if got[2] == inline[2]:
            return got[3] == inline[3]
        axes = [a for a, (i, g) in enumerate(zip(inline[2], got[2])) if i != g]
        if len(axes) != 1 or inline[2][axes[0]] != got[2][axes[0]] * count:
            return False
        n = got[2][axes[0]]
        whole = np.asarray(inline[3])
        return np.take(whole, range(replica * n, (replica + 1) * n), axis=axes[0]).tolist() == got[3]
    if isinstance(inline, (tuple, list)) and isinstance(got, (tuple, list)):
        return (
            type(inline) is type(got)
            and len(inline) == len(got)
            and all(_share(i, g, replica, count) for i, g in zip(inline, got))
        )
    if isinstance(inline, dict) and isinstance(got, dict):
        return inline.keys() == got.keys() and all(_share(inline[k], got[k], replica, count) for k in inline)
    return inline == got


def _parse(entry: str):
    return eval(entry, {"__builtins__": {}})  # a repr of plain tuples, lists, dicts and numbers


def test_each_multilearner_replica_reads_its_own_actors_share(client, inline_saw):
    learners = saw("multilearner", client)["learner"]
    assert len(learners) == 2
    for index, seen in enumerate(learners):
        assert len(seen) == len(inline_saw["learner"][0])
        for mine, whole in zip(seen, inline_saw["learner"][0]):
            assert _share(_parse(whole), _parse(mine), index, 2), (index, whole, mine)


def test_async_hands_the_learner_one_acting_replicas_share_at_a_time(client, inline_saw):
    kinds = [seen for seen in saw("async", client)["learner"][0]]
    whole = [_parse(e) for e in inline_saw["learner"][0]]
    assert kinds and len(kinds) % 3 == 0
    for read in map(_parse, kinds):
        # some iteration's read, of some acting replica: same kinds, that replica's rows
        assert any(_share(w, read, r, 2) for w in whole if w[0] == read[0] for r in range(2)), read
