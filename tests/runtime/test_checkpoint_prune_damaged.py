"""Pruning counts only checkpoints that load: a damaged newer one never costs a good older
one its place, and the error for a damaged one names the file inside that is damaged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workbench as wb
from workbench.errors import CheckpointError
from workbench.runtime.state.checkpoint import load_checkpoint


def counter_fdg() -> wb.FDG:
    fdg = wb.FDG()
    fdg.add_fragment("counter", "n = 0", rate="init")
    fdg.add_fragment("counter", "n += 1", rate="step")
    return fdg


def write_at(root: Path, iterations: list[int]) -> None:
    """Checkpoints of the counter FDG at each of ``iterations`` in ``root`` (keep all)."""
    for it in iterations:
        run = counter_fdg().run(iterations=it, steps=1, progress=False)
        run.checkpoint(root, keep=None)


def truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("iteration-*"))


def test_a_damaged_newer_checkpoint_does_not_cost_a_good_older_one_its_place(tmp_path):
    # the reported layout: 5, 10, 12 with 12's state.pt truncated; resume from 10, write 11
    write_at(tmp_path, [5, 10, 12])
    truncate(tmp_path / "iteration-000012" / "state.pt")
    run = counter_fdg().run(
        iterations=1,
        steps=1,
        progress=False,
        resume=str(tmp_path / "iteration-000010"),
        checkpoint_dir=str(tmp_path),
        checkpoint_every=1,
    )
    assert run.state.iteration == 11
    got = names(tmp_path)
    assert {"iteration-000005", "iteration-000010", "iteration-000011"} <= set(got), got
    for good in ("iteration-000005", "iteration-000010", "iteration-000011"):
        load_checkpoint(tmp_path / good)
    # the damaged one is newer than the oldest kept: left to be looked at, not counted
    assert "iteration-000012" in got


def test_a_damaged_checkpoint_goes_once_it_is_older_than_those_kept(tmp_path):
    write_at(tmp_path, [1, 2])
    truncate(tmp_path / "iteration-000002" / "state.pt")
    write_at(tmp_path, [3])
    run = counter_fdg().run(iterations=4, steps=1, progress=False)
    run.checkpoint(tmp_path, keep=2)
    # loadable: 1, 3, 4 -> keep 3, 4; 2 (damaged) and 1 are older than 3: both go
    assert names(tmp_path) == ["iteration-000003", "iteration-000004"]


def test_intact_is_false_for_a_truncated_state_or_a_broken_manifest(tmp_path):
    from workbench.runtime.state.checkpoint import _intact

    write_at(tmp_path, [1, 2, 3])
    good, no_state, no_manifest = (tmp_path / f"iteration-00000{i}" for i in (1, 2, 3))
    truncate(no_state / "state.pt")
    (no_manifest / "manifest.json").write_text("{not json")
    assert _intact(good)
    assert not _intact(no_state)
    assert not _intact(no_manifest)


def test_the_error_for_a_damaged_checkpoint_names_the_file_inside(tmp_path):
    write_at(tmp_path, [1, 2])
    second = tmp_path / "iteration-000002"
    truncate(second / "state.pt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(second)
    text = str(info.value)
    assert f"checkpoint {second} cannot be read (state.pt:" in text
    assert "its state.pt is damaged" in text and "iteration-000001" in text

    shutil.copy(tmp_path / "iteration-000001" / "state.pt", second / "state.pt")
    (second / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(second)
    assert f"checkpoint {second} cannot be read (manifest.json:" in str(info.value)
    assert "its manifest.json is damaged" in str(info.value)
