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
    fdg.add_fragment("env", (
        "n = N // replica.count\n"
        "rows = np.arange(replica.index * n, (replica.index + 1) * n)\n"
        "obs_dim = 4\n"                 # the same on every replica: passed on as it is
        "flag = False\n"
        "nothing = None\n"
        "label = 'cartpole'\n"
        "half = np.array(0.5)\n"
        "batch = rows.astype(np.float32)\n"   # each replica's share of the batch: joined
        "tbatch = torch.as_tensor(rows)\n"
        "pair = (rows * 2, 3)\n"
        "info = {'rows': rows, 'k': 7, 'none': None}\n"
        "obs = rows.astype(float)\n"
        "t = 0\n"
    ), rate="init")
    fdg.add_fragment("actor", SIGNATURE, rate="init")
    fdg.add_fragment("actor", (
        "seen.append(repr(sig(('step', obs, flag, obs_dim))))\n"
        "action = np.zeros(obs.shape[0])\n"
        "go = True\n"    # per step to every env replica (scattered under fine): whole
        "note = None\n"
    ), rate="step")
    fdg.add_fragment("env", (
        "t += 1\n"
        "obs = rows + t + action + (0 if go is True and note is None else 1000)\n"
        "reward = np.ones(n)\n"
        "done_all = False\n"
        "step_no = t\n"
        "stats = {'obs': obs, 't': t}\n"
    ), rate="step")
    fdg.add_fragment("env", "it_batch = rows * 10\nit_scalar = 1.5\nit_none = None", rate="iteration")
    fdg.add_fragment("learner", SIGNATURE, rate="init")
    fdg.add_fragment("learner", (
        "seen.append(repr(sig(('init', obs_dim, flag, nothing, label, half, batch, tbatch, pair, info))))\n"
        "seen.append(repr(sig(('stacked', obs, reward, done_all, step_no, stats))))\n"
        "seen.append(repr(sig(('iteration', it_batch, it_scalar, it_none))))\n"
    ), rate="iteration")
    return fdg


def saw(policy, client) -> dict[str, list[list[str]]]:
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = battery_fdg().run(iterations=2, steps=T, policy=policy, progress=False, keep_state=True, **kwargs)
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
