"""Env replicas that step different numbers of envs get back exactly their own rows every
step, under SingleLearnerFine's lockstep loop as when acting on arrival (docs/boundaries.md,
"1 → M, per step"): the actor's scatter is the mirror of the gather that joined their rows.

Before, the lockstep scatter cut the actor's actions into NumPy's near-equal pieces: with
env replicas stepping 2 and 3 envs, env ids [0, 1] received actions [0, 1, 2] and env ids
[2, 3, 4] received [3, 4] (a wb.envs CartPole crashed with "check the actor's batch size").
Acting on arrival split by each replica's rows already."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.transport.channels import LocalPostman, Mailbox, Peers
from workbench.runtime.values.scatter import RowsAmbiguous, split

STEPS = 3


class EchoEnvs:
    """``n`` envs whose observation is their id; each step keeps what it was sent."""

    def __init__(self, first_id: int, n: int) -> None:
        self.ids = np.arange(first_id, first_id + n)
        self.got: list[list] = []

    def reset(self):
        return self.ids[:, None].astype(np.float32)

    def step(self, action, extra):
        self.got.append(
            [
                np.asarray(action).tolist(),
                np.asarray(extra["a"]).tolist(),
                extra["k"],
                np.asarray(extra["l"][0]).tolist(),
            ]
        )
        return self.reset(), np.ones(len(self.ids), np.float32)


def _fdg() -> wb.FDG:
    """Env replica r steps 2 + r envs, ids counted on from the replica before; the actor
    answers every env with its id (an array, and a dict of an array, a number and a list)."""
    fdg = wb.FDG(namespace={"np": np, "EchoEnvs": EchoEnvs})
    fdg.add_fragment(
        "env",
        (
            "n = 2 + replica.index\n"
            "envs = EchoEnvs(first_id=sum(2 + r for r in range(replica.index)), n=n)\n"
            "obs = envs.reset()\n"
        ),
        rate="init",
    )
    fdg.add_fragment(
        "actor",
        ("ids = obs[:, 0].astype(np.int64)\naction = ids\nextra = {'a': ids * 10, 'k': 7, 'l': [ids + 100]}\n"),
        rate="step",
    )
    fdg.add_fragment("env", "obs, reward = envs.step(action, extra)\ngot = envs.got", rate="step")
    fdg.add_fragment("learner", "seen = action.tolist()", rate="iteration")
    return fdg


@pytest.mark.parametrize("arrival", [False, True], ids=["lockstep", "on-arrival"])
def test_each_env_replica_gets_back_its_own_rows(client, arrival):
    run = _fdg().run(
        iterations=2,
        steps=STEPS,
        policy=wb.SingleLearnerFine(envs=2),
        cluster=client,
        progress=False,
        keep_state=True,
        **({"act_on_arrival": True} if arrival else {}),
    )
    envs = run.state.fragments["env"]
    assert len(envs) == 2
    for ids, env in zip(([0, 1], [2, 3, 4]), envs):
        got = env["got"]
        assert len(got) == 2 * STEPS
        for action, a, k, listed in got:  # every step: its own ids, in its own order
            assert action == ids, got
            assert a == [i * 10 for i in ids] and k == 7 and listed == [i + 100 for i in ids], got
    # the gather the scatter mirrors: the learner's actions [T, 5] in replica order
    assert run.state.fragments["learner"][0]["seen"] == [[0, 1, 2, 3, 4]] * STEPS


def test_a_scatter_splits_by_the_rows_each_replica_sent_in_its_gather():
    """The mechanism, in one process: the actor's Peers gathers 2 and 3 rows from the env
    replicas, and splits its answer back 2 and 3 (a value of other rows near-equally)."""
    boxes = {("actor", 0): Mailbox(), ("env", 0): Mailbox(), ("env", 1): Mailbox()}
    postman = LocalPostman(boxes)
    counts = {"actor": 1, "env": 2}

    def stopped() -> bool:
        return False

    actor = Peers("actor", 0, boxes[("actor", 0)], postman, counts, stopped)
    for r, rows in enumerate([2, 3]):
        Peers("env", r, boxes[("env", r)], postman, counts, stopped).send(
            "actor", "gather", "step:env.obs", 0, np.full(rows, r)
        )
    assert actor.receive("env", "gather", "step:env.obs", 0).tolist() == [0, 0, 1, 1, 1]
    assert actor.rows_sent == {"env": {"step:env.obs": (2, 3)}}
    actor.send("env", "scatter", "step:actor.action", 0, {"a": np.arange(5), "other": np.arange(4), "k": 1})
    got = [boxes[("env", r)].take("step:actor.action", 0, 0, stopped) for r in range(2)]
    assert [g["a"].tolist() for g in got] == [[0, 1], [2, 3, 4]]
    assert [g["other"].tolist() for g in got] == [[0, 1], [2, 3]]  # no gather of 4 rows: near-equal
    assert [g["k"] for g in got] == [1, 1]


def test_without_a_gather_to_mirror_a_scatter_splits_near_equally():
    """The documented fallback (docs/boundaries.md): nothing read from those replicas yet
    (an init value), or an array of other rows."""
    assert [p.tolist() for p in split(np.arange(5), 2)] == [[0, 1, 2], [3, 4]]
    assert [p.tolist() for p in split(np.arange(5), 2, {"step:env.obs": (2, 2)})] == [[0, 1, 2], [3, 4]]
    assert [p.tolist() for p in split(np.arange(5), 2, {"step:env.obs": (2, 3)})] == [[0, 1], [2, 3, 4]]


def test_rows_that_add_up_to_two_different_splits_are_an_error_not_a_guess():
    with pytest.raises(RowsAmbiguous, match=r"\[2, 3\] rows \('obs'\) and \[3, 2\] rows \('mask'\)"):
        split(np.arange(5), 2, {"step:env.obs": (2, 3), "step:env.mask": (3, 2)})


def test_an_ambiguous_scatter_is_the_actor_s_error(client):
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "obs = np.zeros(2 + replica.index)\nmask = np.zeros(3 - replica.index)", rate="init")
    fdg.add_fragment("actor", "action = np.zeros(len(obs) + 0 * len(mask))", rate="step")
    fdg.add_fragment(
        "env",
        "obs = np.zeros(2 + replica.index) + action.sum()\nmask = np.zeros(3 - replica.index)\n"
        "reward = np.ones(len(obs))",
        rate="step",
    )
    fdg.add_fragment("learner", "pass", rate="iteration")
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=STEPS, policy=wb.SingleLearnerFine(envs=2), cluster=client, progress=False)
    message = str(info.value)
    assert "'actor'" in message and "'action'" in message and "ambiguous" in message, message
