"""A background run that failed, seen from the cells after it: the next edit, update or run
says so once, and ``%fdg stop`` answers for the background run whatever ran after it."""

from __future__ import annotations

import pytest

from tests.conftest import LOOP_CELLS

#: the learner raises in its 4th iteration (iteration 3, counted from 0)
FAILING_CELLS = (
    *LOOP_CELLS[:3],
    "scale = 1.0",
    "%%fragment learner --init\nn = 0\n",
    "%%fragment learner\nn += 1\nif n == 4:\n    raise RuntimeError('diverged')\nseen = reward.shape[0] * scale\n",
)
NOTICE = "the background run failed at iteration 3 (fragment 'learner' raised RuntimeError: diverged)"


def _magics(ip):
    return ip.magics_manager.registry["WorkbenchMagics"]


def _cells(ip, *cells):
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec or result.error_before_exec


@pytest.fixture(autouse=True)
def _forget_the_background_run(ip):
    """The shell (and its magics) outlive a test: its background run must not reach the next."""
    yield
    job = _magics(ip)._background
    if job is not None:
        job.join(timeout=60)
    _magics(ip)._background = None


def _failed_in_the_background(ip, capsys):
    _cells(ip, *FAILING_CELLS)
    ip.run_line_magic("fdg", "run --background --iterations 100 --steps 1 --no-progress")
    _magics(ip)._background.join(timeout=60)
    assert not _magics(ip).fdg.running
    out = capsys.readouterr().out  # the start cell's own line, as before
    assert "workbench: the background run failed: fragment 'learner'" in out
    return _magics(ip).fdg.last_run


def test_an_update_after_a_failed_background_run_says_so_once(ip, capsys):
    _failed_in_the_background(ip, capsys)
    ip.run_line_magic("fdg", "update scale")
    out = capsys.readouterr().out
    assert "nothing is running: the next run reads these values anyway." in out
    assert f"{NOTICE}; %fdg stop returns its record (run.error has why)." in out
    ip.run_line_magic("fdg", "update scale")
    assert "failed" not in capsys.readouterr().out  # once


def test_an_edit_after_a_failed_background_run_says_so_once(ip, capsys):
    _failed_in_the_background(ip, capsys)
    edit = "%%fragment learner\nn += 1\nseen = reward.shape[0] * scale\n"
    _cells(ip, edit)
    out = capsys.readouterr().out
    assert "learner: reads" in out and NOTICE in out and "%fdg stop returns its record" in out
    _cells(ip, edit)
    assert "failed" not in capsys.readouterr().out


def test_a_foreground_run_after_it_says_so_and_stop_still_returns_the_failed_run(ip, capsys):
    failed = _failed_in_the_background(ip, capsys)
    _cells(ip, "%%fragment learner\nseen = reward.shape[0]\n")  # fixed (this says it, once)
    capsys.readouterr()
    foreground = ip.run_line_magic("fdg", "run --iterations 2 --steps 1 --no-progress")
    assert foreground.status == "finished"
    assert NOTICE not in capsys.readouterr().out  # said at the edit already
    record = ip.run_line_magic("fdg", "stop")
    out = capsys.readouterr().out
    assert record is failed and record is not foreground
    assert record.status == "failed" and "diverged" in str(record.error)
    assert f"nothing is running: {NOTICE}; returning its record (run.error has why)." in out
    assert "ended by itself" not in out


def test_a_foreground_run_is_the_one_that_says_it_when_nothing_else_did(ip, capsys):
    _failed_in_the_background(ip, capsys)
    _magics(ip).fdg.add_fragment("learner", "seen = reward.shape[0]\n")  # the API: no notice
    ip.run_line_magic("fdg", "run --iterations 1 --steps 1 --no-progress")
    assert f"{NOTICE}; %fdg stop returns its record" in capsys.readouterr().out
    assert ip.run_line_magic("fdg", "stop").status == "failed"


def test_a_new_background_run_after_it_says_so_and_takes_over_stop(ip, capsys):
    _failed_in_the_background(ip, capsys)
    _magics(ip).fdg.add_fragment("learner", "seen = reward.shape[0]\n")
    ip.run_line_magic("fdg", "run --background --iterations 2 --steps 1 --no-progress")
    out = capsys.readouterr().out
    assert f"{NOTICE}; the cell that started it has the whole error (%fdg stop answers for the new run)." in out
    _magics(ip)._background.join(timeout=60)
    assert ip.run_line_magic("fdg", "stop").status == "finished"


def test_a_failed_run_returned_by_stop_is_said_no_more(ip, capsys):
    _failed_in_the_background(ip, capsys)
    assert ip.run_line_magic("fdg", "stop").status == "failed"
    capsys.readouterr()
    ip.run_line_magic("fdg", "update scale")
    assert "failed" not in capsys.readouterr().out
    assert ip.run_line_magic("fdg", "stop") is None  # handed over: nothing more to stop or say
    assert capsys.readouterr().out.strip() == "nothing is running."


def test_stop_describes_the_background_run_not_a_later_foreground_one(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "run --background --iterations 3 --steps 1 --no-progress")
    _magics(ip)._background.join(timeout=60)
    background = _magics(ip).fdg.last_run
    foreground = ip.run_line_magic("fdg", "run --iterations 2 --steps 1 --no-progress")
    capsys.readouterr()
    record = ip.run_line_magic("fdg", "stop")
    out = capsys.readouterr().out
    assert record is background and record is not foreground
    assert "the background run ended by itself (finished: 3/3 iterations" in out


def test_stop_with_only_foreground_runs_stops_nothing(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "run --iterations 2 --steps 1 --no-progress")
    capsys.readouterr()
    assert ip.run_line_magic("fdg", "stop") is None
    assert capsys.readouterr().out.strip() == "nothing is running."
