"""Classes of bad input (issue 14): each test covers a class — every way a cell can end its
process, every container a step value can change — not one case. docs/errors.md links here."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import nbformat
import numpy as np
import pytest

import workbench as wb
from tests.conftest import LOOP_CELLS
from workbench.cli import main
from workbench.errors import CheckpointError, ProcessDiedError, WorkerLostError
from workbench.runtime.transport.serialisable import SerialisationError


def _loop(namespace=None, *, env_step=None, actor_step=None, learner=None, actor_init=None) -> wb.FDG:
    """env ↔ actor every step, a learner per iteration reading the stacked rewards."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, **(namespace or {})})
    fdg.add_fragment("env", "obs = np.zeros(2)\nseen = 0", rate="init")
    fdg.add_fragment("env", env_step or "seen += 1\nobs = obs + action\nreward = np.ones(2)", rate="step")
    if actor_init:
        fdg.add_fragment("actor", actor_init, rate="init")
    fdg.add_fragment("actor", actor_step or "action = obs * 0", rate="step")
    fdg.add_fragment("learner", learner or "total = reward.sum()", rate="iteration")
    return fdg


# -- cells ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "code, line, what",
    [
        ("x = 1\nreturn x", 2, "'return' outside function"),
        ("for i in range(3):\n    yield i", 2, "'yield' outside function"),
        ("await thing()", 1, "'await' outside function"),
        ("x = [y async for y in z]", 1, "asynchronous comprehension outside"),
        ("break", 1, "'break' outside loop"),
    ],
)
def test_a_cell_that_only_a_function_could_run_is_refused_at_registration(code, line, what):
    fdg = _loop()
    before = dict(fdg.fragments)
    with pytest.raises(wb.FragmentSyntaxError, match=rf"fragment 'actor': syntax error at cell line {line}") as info:
        fdg.add_fragment("actor", code, rate="step")
    assert what in str(info.value) and "FDG is unchanged" in str(info.value)
    assert fdg.fragments == before


@pytest.mark.parametrize(
    "code, bad",
    [
        ("seen += 1\nobs = obs + action\nreward = np.ones(seen % 2 + 1)", "step 1 a float64 array of shape (1,)"),
        ("seen += 1\nobs = obs + action\nreward = None if seen == 2 else np.ones(2)", "step 1 None"),
        (
            "seen += 1\nobs = obs + action\nreward = {'a': np.ones(2)} if seen == 1 else {'b': np.ones(2)}",
            "step 1 a dict with keys 'b'",
        ),
    ],
)
def test_a_step_value_that_changes_shape_or_type_names_the_value_the_cell_and_the_steps(code, bad):
    fdg = _loop(env_step=code)
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(iterations=1, steps=3, progress=False)
    text = str(info.value)
    assert text.startswith("fragment 'env' (step cell), replica 0 on local, raised in iteration 0 at cell line 3:")
    assert "'reward' changes shape or type between steps: step 0 wrote" in text and bad in text
    assert "pad to a fixed size" in text


@pytest.mark.parametrize(
    "code, shown",
    [
        ("import sys\nsys.exit(1)", "SystemExit: 1; a cell must not exit its process"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt, raised by the cell itself"),
        ("import os\nos._exit(3)", "ProcessExit: os._exit(3) was called; a cell must not exit its process"),
    ],
)
def test_a_cell_that_exits_its_process_is_that_cells_error(code, shown):
    fdg = _loop(actor_step="action = obs * 0\n" + code)
    with pytest.raises(wb.FragmentRuntimeError, match=r"^fragment 'actor' \(step cell\)") as info:
        fdg.run(iterations=1, steps=2, progress=False)
    assert shown in str(info.value)
    assert fdg.last_run.status == "failed"  # and this process is still here


ODD_EXCEPTIONS = {
    # an exception that holds what does not pickle (Dask pickles an error with its context)
    "holds a lock": (
        "import threading\nclass Odd(Exception):\n    def __init__(self, m):\n"
        "        super().__init__(m)\n        self.lock = threading.Lock()\n"
        "raise Odd('env broke')",
        "Odd: env broke",
    ),
    # one whose own __str__ raises
    "a broken __str__": (
        "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise Odd(7)",
        "Odd: (7,) (its __str__ raised RuntimeError)",
    ),
    # one of a class defined in the cell (no module to find it by on the driver)
    "a class of the cell's": ("class Odd(ValueError):\n    pass\nraise Odd('bad value')", "Odd: bad value"),
}


@pytest.mark.parametrize("kind", sorted(ODD_EXCEPTIONS))
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_any_exception_a_cell_raises_is_that_cells_error(kind, policy, client):
    code, shown = ODD_EXCEPTIONS[kind]
    fdg = _loop(
        env_step="seen += 1\nobs = obs + action\nreward = np.ones(2)\nif seen == 2:\n"
        + "\n".join("    " + line for line in code.splitlines())
    )
    with pytest.raises(wb.FragmentRuntimeError, match=r"^fragment 'env' \(step cell\), replica [01] ") as info:
        fdg.run(iterations=2, steps=3, policy=policy, cluster=client if policy != "inline" else None, progress=False)
    assert shown in str(info.value) and "raised in iteration 0" in str(info.value)
    # and the next run works (one step: the cell's raise is not reached)
    assert (
        fdg.run(
            iterations=1, steps=1, policy=policy, cluster=client if policy != "inline" else None, progress=False
        ).status
        == "finished"
    )


def test_a_process_that_dies_again_at_the_same_iteration_stops_the_run():
    from workbench.fdg.policy import Group, Policy
    from workbench.runtime.state.run import Run
    from workbench.trainer import _check_not_repeating, _groups_on

    run = Run("coarse", 5, 2)
    run.policy = Policy("p", (Group(("actor", "env"), 1, ("1",)), Group(("learner",), 1, ("0",))))
    first = WorkerLostError(["1"], iteration=3)
    _check_not_repeating(run, first, None)  # the first loss: recovered from
    with pytest.raises(ProcessDiedError, match=r"'actor\+env' died again at iteration 3 \(worker 1\)"):
        _check_not_repeating(run, WorkerLostError(["1"], iteration=3), (3, _groups_on(run, ["1"])))
    _check_not_repeating(run, WorkerLostError(["1"], iteration=4), (3, ("actor+env",)))  # progress: fine


def test_a_fragment_that_rebinds_a_notebook_module_is_blamed():
    fdg = _loop(env_step="seen += 1\nobs = obs + action\nreward = np.ones(2)\nwb.log('r', 1.0)", actor_init="wb = None")
    with pytest.raises(
        wb.FDGError,
        match=r"^fragment 'actor' \(init cell, cell line 1\) rebinds 'wb', "
        r"which the notebook defines as the module workbench; fragment 'env'",
    ):
        fdg.run(iterations=1, steps=2, progress=False)


# -- the Python API's arguments ----------------------------------------------------------------
def test_api_arguments_of_the_wrong_type_are_refused_at_the_call():
    fdg = wb.FDG()
    with pytest.raises(wb.FragmentOptionError, match="the cell's code must be a string of Python source, got NoneType"):
        fdg.add_fragment("x", code=None)
    with pytest.raises(wb.FragmentOptionError, match=r"reads must be a list of names, got the string 'obs'"):
        fdg.add_fragment("x", "y = obs", reads="obs")
    assert len(fdg) == 0
    with pytest.raises(wb.RunConfigError, match="namespace must be a dict of the notebook's names"):
        wb.FDG(namespace=5)
    fdg = wb.FDG(namespace={"wb": wb})
    fdg.add_fragment("learner", "x = 1\nwb.log(42, 1.0)", rate="iteration")
    with pytest.raises(
        wb.FragmentRuntimeError, match=r"cell line 2:\n    wb.log\(42, 1.0\)\nMetricError: wb.log needs a metric name"
    ):
        fdg.run(iterations=1, steps=1, progress=False)


def test_fine_on_an_fdg_without_step_cells_gives_advice_that_can_help():
    from workbench.fdg.inventory import Inventory, WorkerInfo
    from workbench.fdg.policy import SingleLearnerFine

    fdg = wb.FDG()
    fdg.add_fragment("learner", "x = 1", rate="iteration")
    with pytest.raises(wb.PlacementError, match="this FDG has no step cells") as info:
        SingleLearnerFine().place(fdg, Inventory((WorkerInfo("a", "0"), WorkerInfo("b", "1"))))
    assert "env_fragments" not in str(info.value) and "SingleLearnerCoarse" in str(info.value)


# -- checkpoints --------------------------------------------------------------------------------
def _two_checkpoints(tmp_path) -> tuple[Path, Path]:
    fdg = _loop(learner="total = float(reward.sum())")
    first = Path(fdg.run(iterations=1, steps=2, progress=False).checkpoint(tmp_path))
    second = Path(fdg.run(iterations=1, steps=2, progress=False, resume=str(tmp_path)).checkpoint(tmp_path))
    return first, second


@pytest.mark.parametrize(
    "field, value, shown",
    [
        ("iteration", "three", "'iteration' must be a whole number ≥ 0, got str 'three'"),
        ("fragments", [], "'fragments' must be an object"),
        ("cells", {"a": 1}, "'cells' must be a list"),
        ("policy", None, "'policy' must be an object"),
    ],
)
def test_a_manifest_with_wrong_types_names_the_file_and_the_field(tmp_path, field, value, shown):
    first, second = _two_checkpoints(tmp_path)
    manifest = json.loads((second / "manifest.json").read_text())
    manifest[field] = value
    (second / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as info:
        _load(tmp_path)
    text = str(info.value)
    assert f"checkpoint manifest {second / 'manifest.json'}: {shown}" in text
    assert "that load: iteration-000001" in text


def _load(path):
    from workbench.runtime.state.checkpoint import load_checkpoint

    return load_checkpoint(path)


def test_when_every_state_file_is_corrupt_the_message_says_so_without_torchs_advice(tmp_path):
    first, second = _two_checkpoints(tmp_path)
    for ckpt in (first, second):
        (ckpt / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError) as info:
        _load(tmp_path)
    text = str(info.value)
    assert f"checkpoint {second} cannot be read" in text
    assert "weights_only" not in text and "will likely succeed" not in text
    assert "(iteration-000001) cannot be read either" in text


# -- headless ------------------------------------------------------------------------------------
def test_cli_names_the_ordinary_cell_that_raises_in_one_line(tmp_path, capsys):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench\nimport numpy as np\nimport workbench as wb"),
        nbformat.v4.new_code_cell("import does_not_exist_xyz\nscale = 2"),
        nbformat.v4.new_code_cell("%%fragment env --init\nobs = np.zeros(2) * scale\n"),
        *(nbformat.v4.new_code_cell(cell) for cell in LOOP_CELLS[1:]),
        nbformat.v4.new_code_cell("run = %fdg run --iterations 2 --steps 2"),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"workbench: error: {path}, code cell 2 (an ordinary cell the fragments need), "
        "raised at line 1: ModuleNotFoundError: No module named 'does_not_exist_xyz'. "
        "Fix the cell (or the environment) and run again."
    )


def test_cli_shows_a_fragments_error_without_its_traceback(tmp_path, capsys):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench\nimport numpy as np\nimport workbench as wb"),
        *(nbformat.v4.new_code_cell(cell) for cell in LOOP_CELLS[:3]),
        nbformat.v4.new_code_cell("%%fragment learner\nseen = reward.shape[0] / 0\n"),
        nbformat.v4.new_code_cell("run = %fdg run --iterations 2 --steps 2"),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "original traceback" not in err and 'File "' not in err


def test_workbenchs_task_failures_are_kept_out_of_dasks_worker_log():
    from workbench.cluster.worker_logs import TaskFailureFilter

    def record(key):
        return logging.LogRecord(
            "distributed.worker", logging.ERROR, "", 0, "Compute Failed\nKey:       %s\n", (key,), None
        )

    f = TaskFailureFilter()
    for kind in ("loop", "deploy", "export"):
        assert not f.filter(record(f"actor+env-{kind}-{'0' * 32}"))
    assert f.filter(record("inc-8f2a"))  # the user's own tasks are logged as Dask does
    assert f.filter(logging.LogRecord("distributed.worker", logging.ERROR, "", 0, "other", (), None))


# -- across processes (a cluster) ------------------------------------------------------------------
def test_what_cannot_cross_processes_is_named_with_its_fragment_and_the_fix(client):
    cases = [
        (
            dict(namespace={"lock": threading.Lock()}, actor_step="action = obs * 0\nheld = lock"),
            "the notebook name 'lock' that fragment actor reads cannot be sent to the workers (a _thread.lock cannot be pickled)",
            "Define it in the fragment's --init cell",
        ),
        (
            dict(
                env_step="seen += 1\nobs = obs + action\nreward = np.ones(2)\nfn = lambda: seen",
                learner="total = reward.sum()\nf = fn",
            ),
            "fragment 'env' writes 'fn', which another group of this policy reads, but it cannot be sent "
            "between processes ([0] is a function)",
            "a function must be a module-level function",
        ),
    ]
    # (fragment state that cannot be pickled is not an error: it is left out of snapshots
    # with a warning — tests/runtime/test_state_rules.py)
    dask_said = _Records()  # and only that: not Dask's own reports first (~420 lines of tracebacks)
    loggers = [logging.getLogger(f"distributed.{name}") for name in ("protocol.pickle", "protocol.core", "comm.utils")]
    for logger in loggers:
        logger.addHandler(dask_said)
    try:
        _each_refused(cases, client)
    finally:
        for logger in loggers:
            logger.removeHandler(dask_said)
    assert not dask_said.records, [r.getMessage()[:200] for r in dask_said.records]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _each_refused(cases, client) -> None:
    for kwargs, first, fix in cases:
        for _ in range(2):  # the same message every time, whichever replica meets it first
            with pytest.raises(SerialisationError) as info:
                _loop(**kwargs).run(iterations=2, steps=2, progress=False, policy="coarse", cluster=client)
            assert str(info.value).startswith(first) and fix in str(info.value), str(info.value)


def test_os_exit_in_a_cell_on_a_worker_is_that_cells_error_not_a_lost_worker(client, capfd):
    fdg = _loop(actor_step="import os\naction = obs * 0\nos._exit(1)")
    with pytest.raises(
        wb.FragmentRuntimeError,
        match=r"^fragment 'actor' \(step cell\), replica \d on worker \d, "
        r"raised in iteration 0 at cell line 3",
    ):
        fdg.run(iterations=2, steps=2, progress=False, policy="coarse", cluster=client)
    assert not [e for e in fdg.last_run.events if e.kind == "worker lost"]
    assert "Compute Failed" not in capfd.readouterr().err


@pytest.mark.parametrize("name", ["iteration", "index", "device"])
def test_a_replica_attribute_asked_of_wb_says_where_it_lives(name):
    """``wb.iteration`` (and the other ReplicaInfo fields) are ``replica.…`` in a cell: the
    error names the fragment and the cell line, and says so."""
    from tests.test_bad_input import _cartpole_fdg, _raises_in_run

    err = _raises_in_run(_cartpole_fdg(actor=f"x = wb.{name}\naction = np.zeros(len(obs), dtype=np.int64)"))
    assert err.fragment == "actor" and err.line == 1
    assert f"in a fragment cell it is `replica.{name}`" in str(err)
