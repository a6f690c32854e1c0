"""``%fdg place`` and ``%fdg run`` using the board's placement, through a real InteractiveShell
and the 2-worker LocalCluster fixture."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from tests.conftest import LOOP_CELLS

from .test_magics import _cells


def _fdg(ip):
    return ip.magics_manager.registry["WorkbenchMagics"].fdg


def test_fdg_place_returns_the_board_and_run_uses_its_placement(ip, client, capsys):
    from workbench.widgets.placement import PlacementBoard

    address = client.scheduler.address
    _cells(ip, *LOOP_CELLS)
    board = ip.run_line_magic("fdg", f"place --cluster {address} --steps 4")
    assert isinstance(board, PlacementBoard) and board.steps == 4
    assert "application/vnd.jupyter.widget-view+json" in board._repr_mimebundle_()[0]
    assert _fdg(ip).placement == board.policy and board.policy.name == "SingleLearnerCoarse"
    board.handle({"type": "drop", "fragment": "learner", "worker": "1", "device": "cpu"})
    placed = board.policy
    assert _fdg(ip).placement == placed and placed.group_of("learner").workers == ("1",)
    capsys.readouterr()

    run = ip.run_line_magic("fdg", f"run --iterations 2 --steps 2 --cluster {address}")
    out = capsys.readouterr().out
    assert "policy: the placement board's" in out and "learner ×1 on 1" in out
    assert run.status == "finished" and run.policy_name == "custom"
    assert "learner ×1 on 1" in run.plan_text

    # --policy still wins over the board
    run = ip.run_line_magic("fdg", "run --iterations 1 --steps 2 --policy inline")
    assert run.policy_name == "inline" and "placement board" not in capsys.readouterr().out


def test_a_new_board_replaces_the_last(ip, client):
    _cells(ip, *LOOP_CELLS)
    first = ip.run_line_magic("fdg", f"place --cluster {client.scheduler.address}")
    second = ip.run_line_magic("fdg", f"place --cluster {client.scheduler.address}")
    assert first.comm is None and not first._poller.is_alive()
    assert second.comm is not None and second._poller.is_alive()


def test_reset_forgets_the_placement(ip, client):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", f"place --cluster {client.scheduler.address}")
    assert _fdg(ip).placement is not None
    ip.run_line_magic("fdg", "reset")
    assert _fdg(ip).placement is None


@pytest.mark.parametrize(
    "line, message",
    [
        ("place", "no fragments yet"),
        ("place --steps 0", "--steps must be a whole number ≥ 1"),
        ("place --policy coarse", "unrecognized arguments: --policy coarse"),
    ],
)
def test_bad_place_lines_are_usage_errors(ip, line, message):
    if "steps" in line or "policy" in line:
        _cells(ip, *LOOP_CELLS)
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("fdg", line)


def test_help_mentions_place(ip):
    doc = ip.find_line_magic("fdg").__doc__
    assert "%fdg place" in doc and "placement board" in doc
