"""RunConfig: run options declared once, the same on the magic line, the command line and
in Python; ``workbench run --set``; config docs that ``help()`` shows."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re

import sys

import pytest

import workbench as wb
from workbench.cli import _parser as cli_parser
from workbench.config import RunConfig, add_run_arguments, parse_run_line
from workbench.notebook import load_notebook

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_every_run_option_is_on_the_magic_line_and_the_command_line():
    cli = cli_parser()._subparsers._group_actions[0].choices["run"]
    magic = argparse.ArgumentParser()
    add_run_arguments(magic, "magic")
    for field in dataclasses.fields(RunConfig):
        flag = "--" + field.name.replace("_", "-")
        if "cli" in field.metadata["surfaces"]:
            assert flag in _flags(cli), flag
        if "magic" in field.metadata["surfaces"]:
            assert flag in _flags(magic), flag
    assert "--scheduler" in _flags(cli) and "--cluster" in _flags(cli)  # the old name still works


def test_run_options_are_declared_only_in_runconfig():
    """No parser or signature in workbench/ declares a run option by hand."""
    declared = []
    for path in (ROOT / "workbench").rglob("*.py"):
        text = path.read_text()
        for option in ("--iterations", "--steps", "--target-return", "--checkpoint-every", "--snapshot-every"):
            if re.search(rf"add_argument\(\s*[\"']{option}[\"']", text):
                declared.append(f"{path.name}: {option}")
        if re.search(r"def run\([^)]*\biterations\s*[:=]", text):
            declared.append(f"{path.name}: a run() signature with iterations")
    assert declared == []


@pytest.mark.parametrize(
    "options, message",
    [
        ({"iterations": 0}, "--iterations must be a whole number ≥ 1, got 0"),
        ({"steps": 2.5}, "--steps must be a whole number ≥ 1, got 2.5"),
        ({"target_return": float("nan")}, "--target-return must be a finite number, got nan"),
        ({"target_return": "high"}, "--target-return must be a finite number, got 'high'"),
        ({"policy": 42}, "--policy must be a preset name"),
        ({"cluster": "garbage"}, "--cluster must be a Dask scheduler address"),
        ({"snapshot_every": -1}, "--snapshot-every must be a whole number ≥ 0"),
        ({"policy": "auto", "auto_lag": -1}, "--auto-lag must be a whole number ≥ 0"),
        ({"auto_lag": 1}, "--auto-lag 1 widens what --policy auto tries, and this run's policy is 'inline'"),
        ({"checkpoint_every": 3}, "--checkpoint-every needs --checkpoint-dir"),
        ({"loggers": [object()]}, "has no log\\(row\\) and close\\(\\) methods"),
        ({"progress": "yes"}, "progress must be True, False or a factory"),
        ({"iteration": 3}, "unknown run option 'iteration' \\(did you mean 'iterations'\\?\\)"),
    ],
)
def test_bad_run_options_fail_before_anything_starts(options, message):
    with pytest.raises(wb.RunConfigError, match=message):
        RunConfig.from_options(options)


def test_a_checkpoint_dir_that_is_a_file_is_refused_before_training(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(wb.RunConfigError, match="is a file, not a directory"):
        RunConfig(checkpoint_dir=str(afile))


@pytest.mark.parametrize("field", ["checkpoint_dir", "log_dir"])
def test_a_directory_that_cannot_be_created_is_refused_before_training(tmp_path, field):
    """Tried, not asked: root may "write" to /proc by os.access, and a run trained to its
    end then failed on its checkpoint (or crashed on its log) with nothing kept on disk."""
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(wb.RunConfigError, match="cannot create a directory in"):
        RunConfig(**{field: str(afile / "below")})
    if sys.platform.startswith("linux"):
        with pytest.raises(wb.RunConfigError, match="cannot create a directory in '/proc'"):
            RunConfig(**{field: "/proc/workbench-checkpoints"})
    RunConfig(**{field: str(tmp_path / "new" / "deeper")})  # creatable: fine, and not created yet
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == [afile]


def test_naming_a_cluster_without_a_policy_means_run_there():
    assert RunConfig.from_options({"cluster": "tcp://127.0.0.1:8786"}).policy == "coarse"
    assert RunConfig.from_options({"cluster": "tcp://127.0.0.1:8786", "policy": "fine"}).policy == "fine"


def test_the_magic_line_and_python_build_the_same_config():
    line = parse_run_line("run --iterations 7 --steps 3 --policy coarse --snapshot-every 0 --no-progress")
    assert RunConfig(**line) == RunConfig(iterations=7, steps=3, policy="coarse", snapshot_every=0, progress=False)
    assert parse_run_line("run --background") == {"background": True}


def test_set_overrides_a_notebook_config_before_its_run_line_is_read():
    fdg, options = load_notebook(QUICKSTART, overrides=["cfg.seed=3", "cfg.iterations=7", "cfg.learning_rate=1"])
    cfg = fdg.namespace["cfg"]
    assert cfg.seed == 3 and cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert options["iterations"] == 7  # the run line reads {cfg.iterations}


@pytest.mark.parametrize(
    "override, message",
    [
        ("cfg.sed=3", "PPOConfig has no field 'sed' \\(did you mean 'seed'\\?\\)"),
        ("cfg.seed=three", "cfg.seed is a int \\(1\\); 'three' is a str"),
        ("cfg.seed=True", "cfg.seed is a int \\(1\\); True is a bool"),  # True is an int to isinstance
        ("nothing.seed=3", "the notebook defines no nothing"),
        ("cfg=3", "write NAME.FIELD=VALUE"),
    ],
)
def test_a_bad_set_is_one_clear_error(override, message):
    with pytest.raises(wb.RunConfigError, match=message):
        load_notebook(QUICKSTART, overrides=[override])


class _ClassDefaults:
    n = 8
    lr = 0.1

    def scaled(self):
        return self.lr * 2


@pytest.mark.parametrize("made", [_ClassDefaults, dict(n=8, lr=0.1)], ids=["class attributes", "a dict"])
def test_set_changes_configs_held_as_class_attributes_or_dicts(made):
    """A config need not be a dataclass: ``class Cfg: lr = 0.1`` and ``cfg = {...}`` are
    common in notebooks (they were refused as having no field 'lr'; its fields: '')."""
    from workbench.notebook import apply_overrides

    cfg = made() if isinstance(made, type) else dict(made)
    ns = {"cfg": cfg}
    apply_overrides(ns, ["cfg.lr=0.2", "cfg.n=4"])
    read = (lambda k: cfg[k]) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
    assert (read("lr"), read("n")) == (0.2, 4)
    if not isinstance(cfg, dict):
        assert _ClassDefaults.lr == 0.1  # the instance's value, not the class's default
    with pytest.raises(wb.RunConfigError, match=r"has no field 'scaled'.*its fields: n, lr"):
        apply_overrides(ns, ["cfg.scaled=1"])  # a method is no field
    with pytest.raises(wb.RunConfigError, match=r"cfg.lr is a float \(0.2\); 'x' is a str"):
        apply_overrides(ns, ["cfg.lr='x'"])


def test_set_on_a_value_without_fields_says_what_set_changes():
    from workbench.notebook import apply_overrides

    with pytest.raises(wb.RunConfigError, match="n is a int, which has no fields to set"):
        apply_overrides({"n": 3}, ["n.real=4"])


def test_cli_set_trains_with_the_given_seed_and_reports_a_bad_field_in_one_line(capsys):
    from workbench.cli import main

    assert main(["run", str(QUICKSTART), "--set", "cfg.sed=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'seed'" in err and "Traceback" not in err
    code = main(["run", str(QUICKSTART), "--set", "cfg.seed=3", "--iterations", "1", "--steps", "4", "--no-progress"])
    assert code in (0, 1)  # one iteration: the notebook's target is not reached
    assert "1/1 iterations under inline" in capsys.readouterr().out


@pytest.mark.parametrize(
    "module, name",
    [
        ("workbench.algorithms.ppo", "PPOConfig"),
        ("workbench.algorithms.a3c", "A3CConfig"),
        ("workbench.algorithms.mappo", "MAPPOConfig"),
        ("workbench.algorithms.ppo_continuous", "PPOContinuousConfig"),
    ],
)
def test_every_algorithm_config_shows_its_field_docs_in_help(module, name):
    import importlib
    import pydoc

    cls = getattr(importlib.import_module(module), name)
    text = pydoc.render_doc(cls)
    documented = [f for f in dataclasses.fields(cls) if f.metadata.get("doc")]
    assert len(documented) >= len(dataclasses.fields(cls)) // 2
    for field in documented:
        assert f"{field.name} (" in text and field.metadata["doc"].splitlines()[0][:30] in text


@pytest.mark.parametrize("name", ["iterations", "steps"])
def test_a_required_count_given_as_none_is_refused_before_anything_runs(name):
    import workbench as wb

    fdg = wb.FDG(namespace={})
    fdg.add_fragment("learner", "x = 1", rate="iteration")
    with pytest.raises(wb.errors.RunConfigError, match=f"--{name} must be a whole number ≥ 1, got None"):
        fdg.run(progress=False, **{name: None})
    assert fdg.last_run is None  # refused before a run began


def test_the_policy_option_names_every_preset(capsys):
    """`workbench run --help` (and `%fdg run`'s) lists each preset a user may type."""
    import pytest

    from workbench.cli import main
    from workbench.fdg.policy import PRESETS

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help's lines
    assert all(name in text for name in PRESETS if name.islower())
