"""What a snapshot and a checkpoint hold, and what a restore checks (docs/reliability.md,
"What is saved"; issue 12's state rules):

- fragment state that cannot be pickled never fails a run: snapshots, checkpoints and the
  final state leave it out, the run says so once per name, and a restore runs the init
  cell to build it again;
- state that holds data and is not saved is named at the first checkpoint with how to
  make it saved; an object of plain data is saved by its attributes;
- a resume whose init cell now builds other shapes or dtypes is refused, naming the value.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

import workbench as wb


class Ring:
    """A user's replay buffer without state_dict: plain data only (saved by attributes)."""

    def __init__(self, size: int = 8) -> None:
        self.data = np.zeros((size, 2), np.float32)
        self.count = 0


class Guarded:
    """An object holding a lock: neither picklable nor plain data."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list = []


#: each kind of value a fragment may keep that cannot be pickled
UNPICKLABLE = {
    "lock": "threading.Lock()",
    "sock": "socket.socket()",
    "gen": "(i for i in range(3))",
    "guarded": "Guarded()",
}


def _fdg(obs_dim: int = 2, keep: tuple[str, ...] = tuple(UNPICKLABLE)) -> wb.FDG:
    fdg = wb.FDG(
        namespace={"np": np, "threading": threading, "socket": socket, "Ring": Ring, "Guarded": Guarded, "OBS": obs_dim}
    )
    fdg.add_fragment("env", "obs = np.zeros((3, OBS), np.float32)", rate="init")
    fdg.add_fragment("env", "obs = obs + 1\nreward = np.ones(3)", rate="step")
    init = "\n".join(f"{name} = {UNPICKLABLE[name]}" for name in keep)
    fdg.add_fragment("learner", f"{init}\nring = Ring()\ntotal = 0.0\nupdates = 0", rate="init")
    fdg.add_fragment(
        "learner",
        "total += float(reward.sum())\n"
        "ring.data[ring.count % 8] = obs[-1, 0, :2]\n"
        "ring.count += 1\nupdates += 1" + ("\nwith lock:\n    pass" if "lock" in keep else ""),
        rate="iteration",
    )
    return fdg


def _left_out(run) -> list[str]:
    return [e.message for e in run.events if e.kind == "state left out"]


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_state_that_cannot_be_pickled_never_fails_a_run_and_is_named_once(policy, client, tmp_path, capsys):
    cluster = client if policy != "inline" else None
    run = _fdg().run(
        iterations=6,
        steps=2,
        policy=policy,
        cluster=cluster,
        progress=False,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=2,
    )
    assert run.status == "finished", run.error
    said = _left_out(run)
    # one message per name, however many snapshots left it out
    for name in UNPICKLABLE:
        assert sum(f"keeps {name!r}" in m for m in said) == 1, said
    assert all("init cell to build it again" in m for m in said)
    out = capsys.readouterr().out
    assert "workbench: fragment 'learner' keeps 'lock' in its state, which cannot be pickled" in out
    manifest = json.loads((Path(run.checkpoints[-1]) / "manifest.json").read_text())
    learner = manifest["fragments"]["learner"]
    assert sorted(learner["recreated_by_init"][0]) == sorted(UNPICKLABLE)
    assert {"ring", "total", "updates"} <= set(learner["saved"][0])


def test_a_restore_from_a_state_that_left_values_out_builds_them_again(client):
    first = _fdg().run(iterations=4, steps=2, policy="coarse", cluster=client, progress=False)
    assert first.status == "finished", first.error
    assert _left_out(first)
    learner = first.state.fragments["learner"][0]
    assert "lock" not in learner and learner["updates"] == 4
    # the init cell runs again (building the lock, the socket…), the rest is laid over it
    second = _fdg().run(iterations=3, steps=2, policy="coarse", cluster=client, progress=False, resume=first.state)
    assert second.status == "finished", second.error
    learner = second.state.fragments["learner"][0]
    assert learner["updates"] == 7 and learner["ring"].count == 7
    per_iteration = first.state.fragments["learner"][0]["total"] / 4  # envs × steps: the placement's
    assert learner["total"] == pytest.approx(per_iteration * 7)


def test_the_first_checkpoint_names_the_data_it_does_not_save_and_plain_objects_are_saved(tmp_path):
    run = _fdg(keep=("guarded",)).run(
        iterations=4, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=2
    )
    not_saved = [e.message for e in run.events if e.kind == "state not saved"]
    assert len(not_saved) == 1, not_saved  # at the first checkpoint, once per run
    assert not_saved[0].startswith("checkpoints do not save learner.guarded (a ")
    assert "Guarded)" in not_saved[0] and "state_dict() and load_state_dict()" in not_saved[0]
    # a user's buffer of arrays and ints is saved by its attributes and comes back whole
    resumed = _fdg(keep=("guarded",)).run(iterations=2, steps=2, progress=False, resume=str(tmp_path))
    ring = resumed.state.fragments["learner"][0]["ring"]
    assert ring.count == 6 and ring.data[:6].any(axis=1).all() and not ring.data[6:].any()


def test_modules_functions_and_classes_are_not_named_as_unsaved(tmp_path):
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("learner", "import math\nf = lambda x: x\nclass K: pass\nn = 0", rate="init")
    fdg.add_fragment("learner", "n += 1", rate="iteration")
    run = fdg.run(iterations=2, steps=1, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    assert not [e for e in run.events if e.kind in ("state not saved", "state left out")]


def test_a_resume_whose_init_cell_builds_other_shapes_is_refused_naming_the_value(tmp_path):
    _fdg(keep=()).run(iterations=2, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(wb.FragmentRuntimeError) as info:
        _fdg(obs_dim=3, keep=()).run(iterations=1, steps=2, progress=False, resume=str(tmp_path))
    text = str(info.value)
    assert text.startswith("fragment 'env' (init cell)")
    assert (
        "'obs' does not fit what the init cell builds now: the checkpoint holds a float32 array of "
        "shape (3, 2), the init cell a float32 array of shape (3, 3)"
    ) in text
    assert "wb.FDG.from_checkpoint" in text


def test_a_network_whose_shape_changed_is_refused_naming_the_weight(tmp_path):
    torch = pytest.importorskip("torch")

    def fdg(width: int) -> wb.FDG:
        f = wb.FDG(namespace={"torch": torch, "W": width})
        f.add_fragment("learner", "net = torch.nn.Linear(2, W)\nopt = torch.optim.Adam(net.parameters())", rate="init")
        f.add_fragment(
            "learner",
            "loss = net(torch.ones(1, 2)).sum()\nopt.zero_grad()\nloss.backward()\nopt.step()",
            rate="iteration",
        )
        return f

    fdg(4).run(iterations=2, steps=1, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(
        wb.FragmentRuntimeError,
        match=r"net\.state_dict\(\)\['weight'\] does not fit what the "
        r"init cell builds now: the checkpoint holds a float32 "
        r"tensor of shape \(4, 2\), the init cell a float32 "
        r"tensor of shape \(5, 2\)",
    ):
        fdg(5).run(iterations=1, steps=1, progress=False, resume=str(tmp_path))
    fdg(4).run(iterations=1, steps=1, progress=False, resume=str(tmp_path))  # the same cells still resume


def test_an_array_that_grows_along_its_first_axis_still_resumes(tmp_path):
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("learner", "returns = np.zeros(0)", rate="init")
    fdg.add_fragment("learner", "returns = np.append(returns, 1.0)", rate="iteration")
    fdg.run(iterations=3, steps=1, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    run = fdg.run(iterations=2, steps=1, progress=False, resume=str(tmp_path))
    assert run.state.fragments["learner"][0]["returns"].shape == (5,)
