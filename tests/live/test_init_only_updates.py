"""``fdg.update`` of a value only init cells read says so, naming the part and the init
cells, and that it takes effect at the next run; what a step or iteration cell reads
applies from the boundary as before, and where the cells' code cannot prove "init only"
nothing more is said (docs/live_changes.md).

Each case runs a real training and changes the value while iteration ``AT`` is recorded.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

import workbench as wb
from tests.live.test_live_changes import At

ITERATIONS = 16  # as tests/live/test_live_changes.py: room for the boundary under coarse
AT = 1
NEXT_RUN = "takes effect at the next run"


@dataclasses.dataclass
class Config:
    hidden: int = 4
    lr: float = 0.5
    model: str = "small"


ENV_STEP = "time.sleep(0.005)\nobs = obs + 1 + 0 * weights.sum()"


def learner_fdg(init: str, iteration: str, **names) -> wb.FDG:
    """An env stepping a counter and a learner built by ``init`` and trained by ``iteration``.
    The env reads the learner's latest ``weights`` and takes a few ms a step, so that no
    replica is more than an iteration ahead when the update is made (as with real weights)."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "time": time, "cfg": Config(), **names})
    fdg.add_fragment("env", "obs = np.zeros(2)", rate="init")
    fdg.add_fragment("env", ENV_STEP, rate="step")
    fdg.add_fragment("learner", init, rate="init")
    fdg.add_fragment("learner", iteration, rate="iteration")
    return fdg


def run_with_update(fdg: wb.FDG, change, policy="inline", cluster=None):
    """Train ``fdg``; at iteration ``AT`` apply ``change(cfg)`` to the notebook's config
    in place (as ``cfg.hidden = 8`` in a cell) and send it with ``fdg.update``."""

    def update():
        cfg = fdg.namespace["cfg"]
        change(cfg)
        return fdg.update(cfg=cfg)

    at = At(AT, update)
    run = fdg.run(iterations=ITERATIONS, steps=2, policy=policy, cluster=cluster, progress=False, loggers=[at])
    assert run.status == "finished" and at.result is not None
    assert [e.kind for e in run.events] == ["updated"], run.events  # it landed, inside the run
    return run


def _said(capsys) -> str:
    """The update's notice (the run's own line when it lands comes after it)."""
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("workbench: new value of")]
    assert len(lines) == 2, lines
    return lines[0]


BUILD = "weights = np.zeros(cfg.hidden)"
LEARN = "weights = weights + cfg.lr\nwb.log('size', float(weights.size))\nwb.log('lr', cfg.lr)"


# ------------------------------------------------------ parts only init cells read: said
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_field_only_an_init_cell_reads_is_said_to_take_effect_at_the_next_run(policy, client, capsys):
    fdg = learner_fdg(BUILD, LEARN)
    run = run_with_update(fdg, lambda cfg: setattr(cfg, "hidden", 8), policy, None if policy == "inline" else client)
    line = _said(capsys)
    assert "new value of cfg, applies from iteration" in line  # cfg.lr still applies there
    assert (
        f"cfg.hidden is read only by the init cell of learner, which does not run again in this run: it {NEXT_RUN}"
        in line
    )
    assert "re-running that cell now keeps what it built" in line
    # …and it is the truth: the network keeps the size its init cell built it with
    assert (run.metrics["size"] == 4.0).all()
    assert next(e.message for e in run.events if e.kind == "updated").startswith(
        "new value of cfg (cfg.hidden read only by init cells: from the next run): applies from iteration"
    )


#: how a field is read at init, for a config object and for a dict
READS = {
    "object": ("cfg.model", "cfg.model.upper()", "f'{cfg.model}'", "cfg.model[0]", "(cfg.model, 1)"),
    "dict": ("cfg['model']", "cfg['model'].upper()", "[c for c in cfg['model']]"),
}


@pytest.mark.parametrize("kind, read", [(k, r) for k, reads in READS.items() for r in reads])
def test_every_way_of_reading_a_field_at_init_is_seen(kind, read, capsys):
    """Attribute and constant-key reads, a method of the field, f-strings, comprehensions."""
    if kind == "object":
        fdg = learner_fdg(f"name = {read}\n{BUILD}", LEARN)
    else:
        fdg = learner_fdg(f"name = {read}\nweights = np.zeros(cfg['hidden'])", "weights = weights + cfg['lr']")
        fdg.namespace["cfg"] = dataclasses.asdict(Config())
    run_with_update(fdg, lambda cfg: cfg.update(model="big") if kind == "dict" else setattr(cfg, "model", "big"))
    assert (
        f"cfg.model is read only by the init cell of learner, which does not run again in this run: it {NEXT_RUN}"
        in _said(capsys)
    )


def test_each_changed_init_part_is_named_with_every_init_cell_that_reads_it(capsys):
    fdg = learner_fdg(BUILD + "\nname = cfg.model", LEARN)
    fdg.add_fragment("env", "obs = np.zeros(2)\nlabel = cfg.model", rate="init")

    def change(cfg):
        cfg.hidden, cfg.model = 8, "big"

    run_with_update(fdg, change)
    line = _said(capsys)
    assert (
        "cfg.hidden (init cell of learner), cfg.model (init cells of env, learner) are read only "
        f"by init cells, which do not run again in this run: they {NEXT_RUN.replace('takes', 'take')}"
    ) in line


def test_a_notebook_value_only_init_cells_read_applies_from_no_iteration(capsys):
    """A plain name (a hidden size) read by nothing but an init cell: the notice does not say
    it applies from an iteration at all."""
    fdg = learner_fdg("weights = np.zeros(hidden)", LEARN, hidden=4)
    at = At(AT, lambda: fdg.update(hidden=16))
    run = fdg.run(iterations=ITERATIONS, steps=2, progress=False, loggers=[at])
    line = _said(capsys)
    assert line.startswith("workbench: new value of hidden: hidden is read only by the init cell of learner")
    assert "applies from iteration" not in line and NEXT_RUN in line
    assert (run.metrics["size"] == 4.0).all()


# --------------------------------------------------- what cannot be proved: nothing more
STEP_READS = {
    "the field in a step cell": (ENV_STEP + " + cfg.hidden", None),
    "the field in an iteration cell": (None, LEARN + "\nwb.log('h', cfg.hidden)"),
    "the value whole in a step cell": (ENV_STEP + " + len(str(cfg))", None),
    "the value passed to a function": (None, "weights = weights + getattr(cfg, 'lr')"),
    "the field written by an iteration cell": (None, LEARN + "\ncfg.hidden = 2"),
}


@pytest.mark.parametrize("case", sorted(STEP_READS))
def test_a_field_other_cells_may_read_is_not_claimed(case, capsys):
    step, iteration = STEP_READS[case]
    fdg = learner_fdg(BUILD, iteration or LEARN)
    if step is not None:
        fdg.add_fragment("env", step, rate="step")
    run_with_update(fdg, lambda cfg: setattr(cfg, "hidden", 8))
    line = _said(capsys)
    assert "applies from iteration" in line and "init cell" not in line


def test_code_an_init_cell_defines_to_run_later_counts_as_a_step_read(capsys):
    """A function (or lambda, or generator) built at init and called every iteration reads
    the value then, so the field is not init-only."""
    for build in (
        "scale = lambda w: w * cfg.hidden",
        "def scale(w):\n    return w * cfg.hidden",
        "scale = lambda w: w * sum(cfg.hidden for _ in range(1))",
    ):
        fdg = learner_fdg(f"{BUILD}\n{build}", "weights = scale(weights) + cfg.lr")
        run_with_update(fdg, lambda cfg: setattr(cfg, "hidden", 8))
        line = _said(capsys)
        assert "applies from iteration" in line and "init cell" not in line, build


def test_a_notebook_function_a_cell_calls_may_read_the_value_itself(capsys):
    """``bump`` reads the notebook's ``cfg`` at every call: the source of the cells cannot
    show it, so nothing is claimed for ``cfg``."""
    fdg = learner_fdg(BUILD, "weights = bump(weights) + cfg.lr")
    exec("def bump(w):\n    return w + cfg.hidden", fdg.namespace)  # noqa: S102 — as a notebook cell defines it
    run_with_update(fdg, lambda cfg: setattr(cfg, "hidden", 8))
    line = _said(capsys)
    assert "applies from iteration" in line and "init cell" not in line


def test_an_init_part_that_did_not_change_is_not_mentioned(capsys):
    fdg = learner_fdg(BUILD, LEARN)
    run = run_with_update(fdg, lambda cfg: setattr(cfg, "lr", 0.25))
    line = _said(capsys)
    assert "applies from iteration" in line and "init cell" not in line
    assert run.metrics["lr"].iloc[-1] == 0.25  # the step-time field did apply


def test_a_change_undone_before_the_update_is_not_mentioned(capsys):
    def there_and_back(cfg):
        cfg.hidden = 8
        cfg.hidden = 4

    run_with_update(learner_fdg(BUILD, LEARN), there_and_back)
    assert "init cell" not in _said(capsys)


def test_without_a_run_an_update_just_sets_the_value(capsys):
    fdg = learner_fdg(BUILD, LEARN)
    assert fdg.update(cfg=Config(hidden=8)) is None and fdg.namespace["cfg"].hidden == 8
    assert capsys.readouterr().out == ""


# ------------------------------------------- a run whose init cells may run again: nothing
@pytest.mark.parametrize("again", ["replaced", "re-placed", "worker lost", "state left out", "pending", "auto"])
def test_a_run_whose_init_cells_may_run_again_claims_nothing(again):
    """A re-placement, a lost worker or a value left out of a fragment's state (it does not
    pickle) runs init cells again with the values as they are then; so do auto's trials."""
    from types import SimpleNamespace

    from workbench.live_edits import _init_values, init_only_changes
    from workbench.runtime.state.run import RunEvent

    fdg = learner_fdg(BUILD, LEARN)
    run = SimpleNamespace(rows=[{}], events=[], auto_table=None)
    trainer = SimpleNamespace(
        fdg=fdg, namespace=fdg.namespace, run_record=run, _pending=None, init_values=_init_values(fdg, fdg.namespace)
    )
    changed = {"cfg": Config(hidden=8)}
    assert init_only_changes(fdg, trainer, changed) == [("cfg.hidden", ("learner",))]
    if again == "pending":
        trainer._pending = "coarse"
    elif again == "auto":
        run.auto_table = []
    else:
        run.events.append(RunEvent(again, "…", 1))
    assert init_only_changes(fdg, trainer, changed) == []
