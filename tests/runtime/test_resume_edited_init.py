"""A resume from a checkpoint whose init cell was edited since (docs/reliability.md,
"Restoring"): a name whose first value the edit makes another way must still be of the
new first value's kind — else the resume is refused, naming the value, the cell line, both
kinds and the ways out, and nothing changes; names the edit did not touch keep what the
run made of them, whatever their kind; an edited value the checkpoint replaces (another
dtype, a first axis of another size, another number) runs as the checkpoint's, and is said
once per value, naming what the edited cell built and what the checkpoint restores.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from tests.conftest import toy_fdg
from workbench.errors import CheckpointError
from workbench.runtime.state.checkpoint import load_checkpoint, save_checkpoint
from workbench.runtime.state.portable import PortableState, encode_state, restore_into
from workbench.runtime.state.resume_checks import EDITED_KEY, MISSING, edited_bindings, replaced_notes

torch = pytest.importorskip("torch")


# -- which names an edit touches ----------------------------------------------------------
@pytest.mark.parametrize(
    "old, new, touched",
    [
        ("scale = 1.0\nn = 0", "scale = np.ones(4)\nn = 0", {"scale"}),  # its own line
        ("N = 8\nenvs = make(N)\nk = 1", "N = 4\nenvs = make(N)\nk = 1", {"N", "envs"}),  # a line it reads
        ("buf = np.zeros(3)", "buf = np.zeros(3)\nbuf[0] = 1", {"buf"}),  # changed in place
        ("buf = np.zeros(3)", "buf = np.zeros(3)\nbuf.fill(2)", {"buf"}),
        ("a = 1", "a = 1\nb = 2", {"b"}),  # new
        ("a = 1  # one\n\nb = 2", "b = 2\na = 1", set()),  # comments, order
        ("best = None\nlr = 1e-3", "best = None\nlr = 3e-4", {"lr"}),
        ("a = 1\nb = a\nb += 1", "a = 1\nb = a", {"b"}),  # a line gone
    ],
)
def test_an_edit_touches_the_names_whose_first_value_it_makes_another_way(old, new, touched):
    assert set(edited_bindings(old, new)) == touched


def test_a_fragment_without_an_init_cell_in_the_checkpoint_has_every_name_new():
    assert set(edited_bindings(None, "a = 1\nb = a")) == {"a", "b"}


# -- what restoring an edited name accepts ------------------------------------------------
def _restore(saved_value, new_value, name="x"):
    """Restore ``saved_value`` over ``new_value``, the name marked as edited."""
    saved, _ = encode_state({name: saved_value})
    saved = PortableState(saved)
    saved[EDITED_KEY] = {
        "fragment": "env",
        "names": {name: {"line": 2, "now": f"{name} = NEW", "was": f"{name} = OLD"}},
    }
    ns = {name: new_value}
    return restore_into(ns, saved), ns


class Box:
    """A user's object saved by its attributes."""

    def __init__(self, scale) -> None:
        self.scale = scale
        self.count = 0


KIND_CHANGES = {
    "float → array": (1.0, np.ones(4), "a float (1.0)", "a float64 array of shape (4,)"),
    "array → float": (np.ones(4), 1.0, "a float64 array of shape (4,)", "a float (1.0)"),
    "int → str": (3, "three", "an int (3)", "a str ('three')"),
    "array → tensor": (
        np.zeros((2, 3), np.float32),
        torch.zeros(2, 3),
        "a float32 array of shape (2, 3)",
        "a float32 tensor of shape (2, 3)",
    ),
    "list → dict": ([1, 2], {"a": 1}, "a list of 2 items", "a dict of 1 item"),
    "tuple → list": ((1, 2), [1, 2], "a tuple of 2 items", "a list of 2 items"),
    "None → array": (None, np.zeros(3), "None", "a float64 array of shape (3,)"),
    "float → object": (1.0, Box(1.0), "a float (1.0)", "Box"),
}


@pytest.mark.parametrize("change", list(KIND_CHANGES))
def test_an_edited_name_of_another_kind_is_refused_naming_both_kinds_and_the_ways_out(change):
    saved, new, said_saved, said_new = KIND_CHANGES[change]
    with pytest.raises(ValueError) as info:
        _restore(saved, new)
    text = str(info.value)
    assert text.startswith(
        f"'x' does not fit what the edited init cell builds now: the checkpoint holds {said_saved}, the init cell "
    )
    assert said_new in text
    assert "fragment 'env'" in text and "line 2: `x = NEW`, which was `x = OLD`" in text
    assert "wb.FDG.from_checkpoint(DIR)" in text and "ckpt.leave_out('env', 'x')" in text
    assert "start a new run" in text


@pytest.mark.parametrize(
    "where, saved, new, path",
    [
        ("in a dict", {"scale": 1.0, "n": 2}, {"scale": np.ones(4), "n": 2}, "x['scale']"),
        ("in a list", [1.0, "a"], [np.ones(2), "a"], "x[0]"),
        ("an attribute", Box(1.0), Box(np.ones(4)), "x.scale"),
    ],
)
def test_a_part_of_another_kind_is_refused_naming_the_part(where, saved, new, path):
    with pytest.raises(ValueError, match="^" + re.escape(f"{path} does not fit")):
        _restore(saved, new)


@pytest.mark.parametrize(
    "saved, new, said",
    [
        (1.0, 2, "the edited cell builds an int (2), the checkpoint restores a float (1.0)"),  # numbers
        (np.float32(1.5), 0.0, "the edited cell builds a float (0.0), the checkpoint restores a float (1.5)"),
        (
            np.zeros((3, 2)),
            np.ones((3, 2), np.float32),  # a dtype may change (docs: plain arrays)
            "the edited cell builds a float32 array of shape (3, 2), the checkpoint restores a float64 array of shape (3, 2)",
        ),
        (2.5, None, "the edited cell builds None, the checkpoint restores a float (2.5)"),  # a placeholder
        ([1, 2, 3], [0], "the edited cell builds a list of 1 item, the checkpoint restores a list of 3 items"),
        (
            {"a": 1.0},
            {"b": np.ones(2)},
            "the edited cell builds a dict with keys 'b', the checkpoint restores a dict with keys 'a'",
        ),
    ],
)
def test_an_edited_name_of_the_same_kind_resumes_with_the_saved_value_and_says_so(saved, new, said):
    notes, ns = _restore(saved, new)
    assert len(notes) == 1, notes
    assert notes[0].startswith(
        "fragment 'env' resumes 'x' from the checkpoint, not as its edited init cell "
        f"builds it (line 2: `x = NEW`, which was `x = OLD`): {said}. "
    ), notes[0]
    assert "start a fresh run (without resume= / --resume)" in notes[0]
    assert "undo the edit (wb.FDG.from_checkpoint(DIR)" in notes[0] and "ckpt.leave_out('env', 'x')" in notes[0]
    np.testing.assert_equal(ns["x"], saved)


def test_an_unedited_name_keeps_what_the_run_made_of_it_whatever_its_kind():
    # init: `obs = 0.0`, the step cell rebinds it to an array; `best = None`, then a float
    saved, _ = encode_state({"obs": np.ones((4, 2)), "best": 3.5})
    ns = {"obs": 0.0, "best": None}
    assert restore_into(ns, PortableState(saved)) == []
    assert ns["obs"].shape == (4, 2) and ns["best"] == 3.5


@pytest.mark.parametrize(
    "saved, new, said",
    [
        (
            np.zeros((8, 4)),
            np.zeros((4, 4)),
            ": the edited cell builds a float64 array of shape (4, 4), the checkpoint restores a float64 array of shape (8, 4).",
        ),
        (
            Box(np.zeros((8, 3))),
            Box(np.zeros((4, 3))),  # an env object's arrays
            ": x.scale: the edited cell builds a float64 array of shape (4, 3), the checkpoint restores a float64 "
            "array of shape (8, 3).",
        ),
        (
            torch.zeros(8, 2),
            torch.zeros(4, 2),
            ": the edited cell builds a float32 tensor of shape (4, 2), the checkpoint restores a float32 tensor of shape (8, 2).",
        ),
    ],
)
def test_an_edited_first_axis_is_kept_and_said_with_both_sizes(saved, new, said):
    notes, ns = _restore(saved, new)
    assert len(notes) == 1, notes
    assert said in notes[0] and notes[0].startswith("fragment 'env' resumes 'x' from the checkpoint")
    assert "ckpt.leave_out('env', 'x')" in notes[0]
    kept = ns["x"].scale if isinstance(ns["x"], Box) else ns["x"]
    assert kept.shape[0] == 8  # the docs' rule: the first axis may differ, the saved one is used


# -- what a resume says it replaced (pure: encoded saved values against built ones) -------
def _mark(*names: str) -> dict:
    return {
        "fragment": "env",
        "names": {n: {"line": i + 1, "now": f"{n} = NEW", "was": None} for i, n in enumerate(names)},
    }


def _notes(saved: dict, built: dict, *marked: str) -> list[str]:
    return replaced_notes(built, encode_state(saved)[0], _mark(*(marked or tuple(saved))))


def test_every_edited_value_the_checkpoint_replaces_gets_one_note_naming_it():
    saved = {"obs": np.zeros((3, 2)), "lr": 3e-4, "n": 4, "same": np.arange(3.0), "kept": 1.0}
    built = {"obs": np.zeros((3, 2), np.float32), "lr": 1e-4, "n": 4, "same": np.arange(3.0), "kept": 2.0}
    notes = _notes(saved, built, "obs", "lr", "n", "same")  # `kept` not edited: the run's own value
    assert [n.split(" from the checkpoint")[0] for n in notes] == [
        "fragment 'env' resumes 'obs'",
        "fragment 'env' resumes 'lr'",
    ]
    assert "(line 1: `obs = NEW`, new since the checkpoint): the edited cell builds a float32 array" in notes[0]
    assert "the edited cell builds a float (0.0001), the checkpoint restores a float (0.0003)" in notes[1]


def test_a_value_the_edited_cell_did_not_build_or_built_as_saved_is_not_said():
    assert _notes({"x": 1.0}, {"x": MISSING}) == []
    assert _notes({"x": 1.0}, {}) == []
    assert _notes({"x": [1, {"a": np.ones(2)}]}, {"x": [1, {"a": np.ones(2)}]}) == []
    assert _notes({"rng": np.random.default_rng(3)}, {"rng": np.random.default_rng(3)}) == []


def test_same_shapes_with_other_contents_are_said_as_such():
    notes = _notes(
        {"obs": np.ones(3), "rng": np.random.default_rng(1)}, {"obs": np.zeros(3), "rng": np.random.default_rng(2)}
    )
    assert "the checkpoint restores a float64 array of shape (3,) with other values." in notes[0]
    assert "the checkpoint restores a NumPy random Generator in another state." in notes[1]


def test_an_edited_optimiser_s_learning_rate_is_said_where_the_checkpoint_s_wins():
    net = torch.nn.Linear(2, 1)
    trained = torch.optim.Adam(net.parameters(), lr=3e-4)
    net(torch.ones(1, 2)).sum().backward()
    trained.step()
    edited = torch.optim.Adam(net.parameters(), lr=1e-4)
    (note,) = _notes({"opt": trained}, {"opt": edited})
    assert (
        "opt.state_dict()['param_groups'][0]['lr']: the edited cell builds a float (0.0001), the "
        "checkpoint restores a float (0.0003)"
    ) in note
    saved, _ = encode_state({"opt": trained})
    saved[EDITED_KEY] = _mark("opt")
    restore_into({"opt": edited}, saved)
    assert edited.param_groups[0]["lr"] == 3e-4  # what the note says: the checkpoint's runs


def test_a_network_s_weights_are_listed_up_to_four_parts():
    saved = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(3)))
    built = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(3)))  # other random weights
    (note,) = _notes({"net": saved}, {"net": built})
    assert (
        "net.state_dict()['0.weight']: the edited cell builds a float32 tensor of shape (2, 2), the "
        "checkpoint restores a float32 tensor of shape (2, 2) with other values"
    ) in note
    assert "; and 2 more parts." in note


def test_an_unedited_first_axis_is_not_said():
    saved, _ = encode_state({"returns": np.zeros(500)})  # grew during the run
    assert restore_into({"returns": np.zeros(0)}, PortableState(saved)) == []


# -- whole resumes ------------------------------------------------------------------------
def _fdg(init: str, learner_init: str = "best = None\nupdates = 0") -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", init, rate="init")
    fdg.add_fragment("env", "obs = obs * 0 + obs_scale\nreward = np.ones(obs.shape[0])", rate="step")
    fdg.add_fragment("learner", learner_init, rate="init")
    fdg.add_fragment(
        "learner", "updates += 1\nbest = float(reward.sum()) if best is None else max(best, 1.0)", rate="iteration"
    )
    return fdg


FIRST = "obs_scale = 1.0\nobs = np.zeros((3, 2))"


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_resume_whose_edited_init_cell_changed_a_kind_is_refused_and_nothing_changes(policy, client, tmp_path):
    cluster = client if policy != "inline" else None
    _fdg(FIRST).run(
        iterations=2,
        steps=2,
        policy=policy,
        cluster=cluster,
        progress=False,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=1,
    )
    before = _digest(tmp_path)
    edited = _fdg("obs_scale = np.ones(2)  # per dimension\nobs = np.zeros((3, 2))")
    cells = edited.copy()
    with pytest.raises(wb.FragmentRuntimeError) as info:
        edited.run(
            iterations=1,
            steps=2,
            policy=policy,
            cluster=cluster,
            progress=False,
            resume=str(tmp_path),
            checkpoint_dir=str(tmp_path),
            checkpoint_every=1,
        )
    text = str(info.value)
    assert text.startswith("fragment 'env' (init cell)")
    assert (
        "'obs_scale' does not fit what the edited init cell builds now: the checkpoint holds a "
        "float (1.0), the init cell a float64 array of shape (2,)"
    ) in text
    assert "line 1: `obs_scale = np.ones(2)  # per dimension`, which was `obs_scale = 1.0`" in text
    assert "ckpt.leave_out('env', 'obs_scale')" in text
    assert _digest(tmp_path) == before  # the checkpoint is as it was
    assert edited == cells  # and the FDG


def test_an_edit_elsewhere_in_the_init_cell_resumes_names_the_run_rebound(tmp_path):
    # `best` is None at init and a float after; the learner's init cell gets a new line
    first = _fdg(FIRST).run(iterations=2, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    assert isinstance(first.state.fragments["learner"][0]["best"], float)
    resumed = _fdg(FIRST, "best = None\nupdates = 0\nlr = 3e-4").run(
        iterations=2, steps=2, progress=False, resume=str(tmp_path)
    )
    learner = resumed.state.fragments["learner"][0]
    assert learner["updates"] == 4 and isinstance(learner["best"], float) and learner["lr"] == 3e-4


def test_leaving_the_edited_name_out_resumes_everything_else(tmp_path):
    _fdg(FIRST).run(iterations=2, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    edited = _fdg("obs_scale = np.ones(2)\nobs = np.zeros((3, 2))")
    ckpt = load_checkpoint(tmp_path).leave_out("env", "obs_scale")
    resumed = edited.run(iterations=1, steps=2, progress=False, resume=ckpt)
    assert resumed.status == "finished", resumed.error
    assert (resumed.state.fragments["env"][0]["obs_scale"] == np.ones(2)).all()
    assert resumed.state.fragments["learner"][0]["updates"] == 3
    assert resumed.rows[0]["iteration"] == 2
    with pytest.raises(CheckpointError, match=r"saved no 'nope' of fragment 'env'"):
        load_checkpoint(tmp_path).leave_out("env", "nope")


def test_a_resumed_checkpoint_saves_again_without_the_marks(tmp_path):
    first = tmp_path / "first"
    _fdg(FIRST).run(iterations=1, steps=2, progress=False, checkpoint_dir=str(first), checkpoint_every=1)
    edited = _fdg("obs_scale = 2.0\nobs = np.zeros((3, 2))")
    ckpt = load_checkpoint(first)
    ckpt.check_fits(edited)  # what a resume does: marks obs_scale
    assert EDITED_KEY in ckpt.state.fragments["env"][0]
    again = load_checkpoint(save_checkpoint(tmp_path / "again", ckpt.state, edited, ckpt.policy))
    assert EDITED_KEY not in again.state.fragments["env"][0]
    ckpt.check_fits(_fdg(FIRST))  # the cells it came from: no marks left
    assert EDITED_KEY not in ckpt.state.fragments["env"][0]


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_resume_that_keeps_the_checkpoint_s_size_says_so_in_the_run_s_events(policy, client, tmp_path):
    """An edited cell that builds 4 envs where the checkpoint holds 8 resumes with 8 (the
    first axis may differ), and the run says which value and both shapes."""
    cluster = client if policy != "inline" else None
    _fdg("obs_scale = 1.0\nobs = np.zeros((8, 2))").run(
        iterations=1,
        steps=2,
        policy=policy,
        cluster=cluster,
        progress=False,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=1,
    )
    resumed = _fdg("obs_scale = 1.0\nobs = np.zeros((4, 2))").run(
        iterations=1, steps=2, policy=policy, cluster=cluster, progress=False, resume=str(tmp_path)
    )
    assert resumed.status == "finished", resumed.error
    assert resumed.state.fragments["env"][0]["obs"].shape == (8, 2)
    said = [e.message for e in resumed.events if e.kind == "edit overridden"]
    assert len(said) == 1 and said[0].startswith("fragment 'env' resumes 'obs' from the checkpoint"), said
    assert (
        "the edited cell builds a float64 array of shape (4, 2), the checkpoint restores a float64 array "
        "of shape (8, 2)"
    ) in said[0]


def test_a_resume_after_an_init_cell_builds_obs_of_another_dtype_runs_the_checkpoint_s_and_says_so(tmp_path, capsys):
    """The case that was silent: the toy FDG's env init cell edited to build float32
    observations; the checkpoint's float64 ones run, and the run says so once."""
    toy_fdg().run(iterations=2, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    capsys.readouterr()
    edited = toy_fdg()
    edited.add_fragment("env", "obs = (np.arange(3.0) + 10 * replica.index).astype(np.float32)\nseen = 0", rate="init")
    resumed = edited.run(iterations=2, steps=2, progress=False, resume=str(tmp_path))
    assert resumed.status == "finished", resumed.error
    obs = resumed.state.fragments["env"][0]["obs"]
    assert obs.dtype == np.float64 and obs.tolist() == [8.0, 9.0, 10.0]  # the checkpoint's, 4 steps on
    said = [e for e in resumed.events if e.kind == "edit overridden"]
    assert len(said) == 1, said
    assert said[0].message == (
        "fragment 'env' resumes 'obs' from the checkpoint, not as its edited init cell builds it (line 1: "
        "`obs = (np.arange(3.0) + 10 * replica.index).astype(np.float32)`, which was `obs = np.arange(3.0) + "
        "10 * replica.index`): the edited cell builds a float32 array of shape (3,), the checkpoint restores a "
        "float64 array of shape (3,). A resume lays the checkpoint's values over what the init cells build "
        "(docs/reliability.md), so the run goes on with the checkpoint's 'obs'. To use the edited value, "
        "start a fresh run (without resume= / --resume), or leave 'obs' out of the resume (ckpt = "
        "load_checkpoint(DIR); ckpt.leave_out('env', 'obs'); fdg.run(resume=ckpt, …)); to resume as the "
        "checkpoint was written, undo the edit (wb.FDG.from_checkpoint(DIR) rebuilds its cells)."
    )
    assert capsys.readouterr().out.count("resumes 'obs' from the checkpoint") == 1  # printed once


def test_a_resume_whose_notebook_value_changed_a_shape_names_that_cause_and_no_internal_frames(tmp_path):
    """The cells are as they were, but a size they read from the notebook is not: the error
    says a notebook value may be why (it said only "the cells changed"), with no traceback
    of workbench's own frames."""

    class Config:
        hidden = 4

    def fdg(cfg) -> wb.FDG:
        f = wb.FDG(namespace={"np": np, "cfg": cfg})
        f.add_fragment("env", "obs = np.zeros((3, 2))", rate="init")
        f.add_fragment("env", "obs = obs + 1", rate="step")
        f.add_fragment("learner", "table = np.zeros((2, cfg.hidden))", rate="init")
        f.add_fragment("learner", "table = table + obs.sum()", rate="iteration")
        return f

    fdg(Config()).run(iterations=1, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    wider = Config()
    wider.hidden = 8
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg(wider).run(iterations=1, steps=2, progress=False, resume=str(tmp_path))
    text = str(info.value)
    assert "'table' does not fit what the init cell builds now" in text
    assert "or a notebook value they read (a size in a config) is not what it was then" in text
    assert "Resume as it says" in text and "Fix the cell" not in text
    assert "portable.py" not in text and "replica.py" not in text
