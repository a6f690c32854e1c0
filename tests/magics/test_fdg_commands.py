"""``%fdg`` subcommands spelt wrong, ``%fdg help``, and what an interrupted run says."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from tests.conftest import LOOP_CELLS


def _cells(ip, *cells):
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec or result.error_before_exec


@pytest.mark.parametrize(
    "command, meant", [("runn", "run"), ("stopp", "stop"), ("Run", "run"), ("updte", "update"), ("polcy", "policy")]
)
def test_a_misspelt_command_is_one_line_with_the_close_one(ip, command, meant):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("fdg", command)
    text = str(info.value)
    assert text == (f"unknown %fdg command {command!r}. Did you mean {meant!r}? %fdg help lists what each does.")


def test_a_command_like_no_other_lists_the_commands(ip):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("fdg", "xyzzy")
    text = str(info.value)
    assert "\n" not in text and "The commands: run, stop, update" in text and "Did you mean" not in text


@pytest.mark.parametrize("line", ["help", "--help", "-h"])
def test_help_prints_the_help(ip, capsys, line):
    assert ip.run_line_magic("fdg", line) is None
    out = capsys.readouterr().out
    assert "%fdg run [options]" in out and "Options of %fdg run:" in out


def test_an_interrupted_inline_run_names_no_cluster(ip, capsys):
    # the cell asks for Ctrl-C itself in its 3rd iteration; the run stops at that
    # iteration's end (the first Ctrl-C), keeping its state
    _cells(
        ip,
        "import threading, _thread, time",
        *LOOP_CELLS[:3],
        "%%fragment learner --init\nn = 0\n",
        "%%fragment learner\nn += 1\nif n == 3:\n    threading.Thread(target=_thread.interrupt_main).start()\n"
        "    time.sleep(0.5)\nseen = reward.shape[0]\n",
    )
    run = ip.run_line_magic("fdg", "run --iterations 100000 --steps 1 --no-progress")
    out = capsys.readouterr().out
    assert run.status == "interrupted" and run.completed_iterations >= 3 and run.state is not None
    assert (
        f"workbench: interrupted after {run.completed_iterations} iterations; every replica was stopped, "
        "its state kept. The run so far is this cell's result."
    ) in out
    assert "cluster" not in out


def test_an_interrupted_cluster_run_says_the_cluster_was_kept(ip, capsys, monkeypatch):
    _cells(ip, *LOOP_CELLS)
    fdg = ip.magics_manager.registry["WorkbenchMagics"].fdg

    def interrupted(**options):  # no cluster needed to see what the cell says of one
        raise KeyboardInterrupt

    monkeypatch.setattr(fdg, "run", interrupted)
    ip.run_line_magic("fdg", "run --iterations 5 --steps 1 --policy coarse --no-progress")
    assert "every replica was stopped and the cluster kept." in capsys.readouterr().out
