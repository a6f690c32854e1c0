"""A value handed from one fragment to another means the same whatever the placement: the
consumer gets its own copy, so a write on either side never reaches the other — in one
process (inline, GPUOnly, an actor beside its env under Coarse) as across processes.

Before, in one process the consumer got the producer's object: an actor's ``buf += 1000``
changed the learner's state inline and under Coarse but not when they sat on two workers,
and an env that refilled ``obs`` in place made every recorded step the last one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.runtime.values.arrays import handed_over

T = 4  # steps per iteration


def hand_over_fdg() -> wb.FDG:
    """Each kind of hand-over, with a write on the far side of it:

    - per step, env → actor: the env refills one array in place and hands it on as ``obs``
      (as a simulator returning its own buffer does); the actor keeps every obs it was
      given and counts how many distinct ones it holds (``T`` when each is its own);
    - step → iteration, env → learner (stacked): the recorded steps must differ;
    - per iteration, learner → actor: the actor writes into the learner's ``buf`` array and
      ``params`` dict (a NumPy array, a torch tensor, a new key); the learner's own must not
      change.
    """
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb})
    fdg.add_fragment("env", "state = np.zeros(1)\nobs = state\nt = 0", rate="init")
    fdg.add_fragment("actor", "kept = []", rate="init")
    fdg.add_fragment("actor", "kept.append(obs)\naction = np.zeros(1)", rate="step")
    # like a simulator that returns its own buffer every step
    fdg.add_fragment("env", "t += 1\nstate[:] = t + action[0]\nobs = state\nreward = np.ones(1)", rate="step")
    fdg.add_fragment(
        "actor",
        (
            "wb.log('actor/distinct', len({float(o[0]) for o in kept}))\n"
            "kept = []\n"
            "buf[:] += 1000\n"
            "params['w'] += 5\n"
            "params['t'] += 5\n"
            "params['new'] = 1\n"
        ),
        rate="iteration",
    )
    fdg.add_fragment(
        "learner", ("buf = np.arange(3.0)\nparams = {'w': np.zeros(2), 't': torch.zeros(2)}\n"), rate="init"
    )
    fdg.add_fragment(
        "learner",
        (
            "wb.log('learner/distinct', len(set(obs.reshape(obs.shape[0], -1)[:, 0].tolist())))\n"
            "wb.log('learner/buf', float(buf.sum()))\n"
            "wb.log('learner/params', float(params['w'].sum() + params['t'].sum().item()))\n"
            "wb.log('learner/keys', len(params))\n"
        ),
        rate="iteration",
    )
    return fdg


@pytest.mark.filterwarnings("ignore::workbench.fdg.plan.IndependentLearnersWarning")
@pytest.mark.parametrize("policy", ["inline", "coarse", "fine", "multilearner", "gpuonly", "async"])
def test_a_consumer_gets_its_own_copy_under_every_policy(policy, client):
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = hand_over_fdg().run(iterations=3, steps=T, policy=policy, progress=False, **kwargs)
    assert len(run.rows) == 3
    for row in run.rows:
        assert row["learner/buf"] == 3.0, "the actor's write reached the learner's buf"
        assert row["learner/params"] == 0.0 and row["learner/keys"] == 2, "…or its params"
        assert row["learner/distinct"] == T, "recorded steps share one array"
        assert row["actor/distinct"] == T, "the actor's kept observations share one array"


def test_the_copy_keeps_types_devices_and_containers():
    weights = torch.nn.Linear(2, 2).state_dict()
    copy = handed_over(weights)
    assert type(copy) is type(weights) and copy._metadata == weights._metadata
    assert all(torch.equal(copy[k], weights[k]) and copy[k].data_ptr() != weights[k].data_ptr() for k in weights)

    param = torch.nn.Parameter(torch.ones(2))
    assert isinstance(handed_over(param), torch.nn.Parameter) and handed_over(param).requires_grad

    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")
    pair = handed_over(Pair(np.zeros(2), [np.ones(1), 3]))
    assert isinstance(pair, Pair) and isinstance(pair.b, list)
    view = np.arange(6).reshape(2, 3)[:, 1]
    assert handed_over(view).base is None  # a view becomes an array of its own

    tied = {"embed": param.detach(), "head": param.detach(), "other": param.detach()[:1]}
    copy = handed_over(tied)  # one view of one storage: one copy, tied as the producer's was
    assert copy["embed"].data_ptr() == copy["head"].data_ptr() != param.data_ptr()
    assert not isinstance(copy["head"], torch.nn.Parameter)
    mixed = handed_over([param, param.detach(), param])  # the same object twice: one copy, as pickle
    assert mixed[0] is mixed[2] and isinstance(mixed[0], torch.nn.Parameter) and mixed[0].requires_grad
    assert type(mixed[1]) is torch.Tensor and mixed[1].data_ptr() == mixed[0].data_ptr()
    assert copy["other"].data_ptr() != copy["embed"].data_ptr() and torch.equal(copy["other"], param[:1])
    assert len({t.data_ptr() for t in handed_over([param.detach(), param.detach()])}) == 1

    class Opaque:  # other objects are handed over as they are (documented: read-only)
        pass

    thing = Opaque()
    assert handed_over(thing) is thing and handed_over("s") == "s"
