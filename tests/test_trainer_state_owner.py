"""Only workbench/trainer.py writes a Trainer's attributes (issue 56, item 4): the modules it
composes (``workbench.live_edits``, ``workbench.runtime.engine.notebook_values``, …) return what
changes, and the trainer applies it to its :class:`~workbench.trainer.TrainerState`.

An AST check over workbench/: outside trainer.py no assignment, augmented assignment or
``del`` reaches an attribute of a name ``trainer`` (or an attribute ``_trainer``: ``trainer.x
=``, ``trainer.state.x =``, ``trainer.state.d[k] =``), no ``trainer.__dict__`` is read, and
no ``setattr``/``delattr`` is given a trainer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKBENCH = Path(__file__).resolve().parents[1] / "workbench"
OWNER = WORKBENCH / "trainer.py"


def _is_trainer(node: ast.AST) -> bool:
    """``trainer``, ``self.trainer``, ``self._trainer``, ``fdg._trainer``…"""
    if isinstance(node, ast.Name):
        return node.id in ("trainer", "_trainer")
    return isinstance(node, ast.Attribute) and node.attr in ("trainer", "_trainer")


def _writes_trainer(target: ast.AST) -> bool:
    """Whether assigning ``target`` writes into a trainer: an attribute (or an item of an
    attribute, at any depth) whose chain starts at a trainer."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_writes_trainer(t) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _writes_trainer(target.value)
    through_attribute = False
    node = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            through_attribute = True
        node = node.value
        if through_attribute and _is_trainer(node):
            return True
    return False


def trainer_writes(source: str) -> list[str]:
    """Each place in ``source`` that writes a trainer's attributes: ``line: code``.

    >>> trainer_writes("trainer.sent_names = set()\\nx = trainer.lock")
    ['1: trainer.sent_names = set()']
    """
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        bad = any(_writes_trainer(t) for t in targets)
        if isinstance(node, ast.Attribute) and node.attr == "__dict__" and _is_trainer(node.value):
            bad = True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and _is_trainer(node.args[0])
        ):
            bad = True
        if bad:
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


@pytest.mark.parametrize(
    "code",
    [
        "trainer.init_values = {}",
        "trainer._changes, trainer._pending = [], None",
        "changes, trainer._changes = trainer._changes, []",
        "trainer.sent_names |= {'cfg'}",
        "given = trainer.__dict__.setdefault('given_values', {})",
        "setattr(trainer, 'x', 1)",
        "trainer.state.pending = None",
        "trainer.state.given_values['cfg'] = 1",
        "self._trainer.x = 1",
        "del trainer.x",
    ],
)
def test_the_check_finds_each_way_of_writing_a_trainer(code):
    assert trainer_writes(code), code


@pytest.mark.parametrize(
    "code",
    [
        "x = trainer.lock",
        "trainer.replace('coarse')",
        "self.state.pending = None",
        "trainer = Trainer(fdg, config)",
        "run.state = trainer.run_record.state",
    ],
)
def test_the_check_lets_reads_and_the_trainers_own_state_be(code):
    assert trainer_writes(code) == [], code


def test_only_trainer_py_writes_a_trainers_attributes():
    found = []
    for path in sorted(WORKBENCH.rglob("*.py")):
        if path == OWNER:
            continue
        found += [
            f"{path.relative_to(WORKBENCH.parent)}:{where}"
            for where in trainer_writes(path.read_text(encoding="utf-8"))
        ]
    assert found == [], (
        "only workbench/trainer.py changes a Trainer's state; return the change "
        "and let the trainer apply it:\n" + "\n".join(found)
    )
