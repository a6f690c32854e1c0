"""The magics through a real IPython InteractiveShell."""

from __future__ import annotations

import pytest

from tests.conftest import LOOP_CELLS


def _fdg(ip):
    return ip.magics_manager.registry["WorkbenchMagics"].fdg


def _cells(ip, *cells):
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec or result.error_before_exec


def test_fragment_prints_what_it_found(ip, capsys):
    _cells(ip, LOOP_CELLS[0])
    _cells(ip, LOOP_CELLS[1])
    out = capsys.readouterr().out
    assert "env: reads np → writes obs · once at init" in out
    assert "actor: reads obs → writes action · every step" in out


def test_learner_defaults_to_every_iteration(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    assert "every iteration" in capsys.readouterr().out.splitlines()[-1]
    assert _fdg(ip)["learner"].rates == ("iteration",)


def test_syntax_error_is_a_usage_error_naming_the_line_and_keeps_the_fdg(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    before = _fdg(ip).copy()
    result = ip.run_cell("%%fragment actor\nx = 1\naction = obs +\n")
    assert not result.success
    err = capsys.readouterr().err
    assert "UsageError" in err and "line 2" in err and "fragment 'actor'" in err
    assert _fdg(ip) == before


def test_unknown_option_is_a_usage_error(ip, capsys):
    result = ip.run_cell("%%fragment actor --speed 3\naction = 1\n")
    assert not result.success
    assert "unrecognized arguments: --speed 3" in capsys.readouterr().err
    assert len(_fdg(ip)) == 0


def test_rerunning_a_cell_replaces_the_fragment_rate(ip):
    _cells(ip, *LOOP_CELLS, "%%fragment actor\naction = obs + 2\n")
    assert _fdg(ip)["actor"].cells["step"].code == "action = obs + 2\n"
    assert len(_fdg(ip)) == 3


def test_fdg_draws_the_graph(ip):
    _cells(ip, *LOOP_CELLS)
    fdg = ip.run_line_magic("fdg", "")
    html = fdg._repr_html_()
    assert "<svg" in html and "learner" in html and "reward" in html


def test_fdg_run_trains_and_returns_the_run(ip):
    _cells(ip, *LOOP_CELLS)
    run = ip.run_line_magic("fdg", "run --iterations 3 --steps 4")
    assert run.status == "finished" and run.completed_iterations == 3
    assert run.metrics["T"].tolist() == [4, 4, 4]


def test_fdg_run_expands_notebook_variables(ip):
    _cells(ip, *LOOP_CELLS, "T = 6")
    run = ip.run_cell("run = %fdg run --iterations 2 --steps {T}\nrun").result
    assert run.metrics["T"].tolist() == [6, 6]


@pytest.mark.parametrize(
    "line, message",
    [
        ("run --iterations 0", "--iterations must be a whole number ≥ 1"),
        ("run --iterations -2", "--iterations must be a whole number ≥ 1"),
        ("run --policy nowhere", "unknown policy 'nowhere'"),
        ("run --bogus", "unrecognized arguments: --bogus"),
        ("fly", "unknown %fdg command 'fly'"),
    ],
)
def test_bad_fdg_lines_are_usage_errors(ip, line, message):
    _cells(ip, *LOOP_CELLS)
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("fdg", line)


def test_run_before_any_fragment_says_what_to_do(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="no fragments yet"):
        ip.run_line_magic("fdg", "run --iterations 1")


def test_background_run_and_stop(ip):
    _cells(ip, "import time", *LOOP_CELLS, "%%fragment learner\ntime.sleep(0.01)\n")
    ip.run_line_magic("fdg", "run --background --iterations 100000 --steps 1")
    import time

    deadline = time.monotonic() + 60  # an iteration done first, however busy the machine
    while (
        not (_fdg(ip).last_run is not None and _fdg(ip).last_run.completed_iterations) and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    run = ip.run_line_magic("fdg", "stop")
    assert run.status == "stopped" and 0 < run.completed_iterations < 100000


def test_fdg_stop_after_a_background_run_ended_by_itself_returns_its_record(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "run --background --iterations 2 --steps 1 --no-progress")
    magics = ip.magics_manager.registry["WorkbenchMagics"]
    magics._background.join(timeout=60)
    record = ip.run_line_magic("fdg", "stop")
    assert record is _fdg(ip).last_run and record.status == "finished"
    assert "the background run ended by itself (finished: 2/2 iterations" in capsys.readouterr().out


def test_reset_forgets_fragments(ip):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "reset")
    assert len(_fdg(ip)) == 0


def test_help_is_there(ip):
    magics = ip.magics_manager.magics
    assert "--every" in magics["cell"]["fragment"].__doc__
    assert "%fdg run" in magics["line"]["fdg"].__doc__


def test_fdg_policy_shows_the_active_policy_and_its_plan(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "run --iterations 1 --steps 2")
    ip.run_line_magic("fdg", "policy")
    out = capsys.readouterr().out
    assert "active policy: inline" in out and "plan for policy 'inline'" in out


def test_fdg_profile_gives_the_last_runs_time_per_fragment(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="nothing has run yet"):
        ip.run_line_magic("fdg", "profile")
    _cells(ip, *LOOP_CELLS)
    ip.run_line_magic("fdg", "run --iterations 3 --steps 2")
    table = ip.run_line_magic("fdg", "profile")
    assert {"actor", "env", "learner"} <= set(table.index)
    assert (table.loc[["actor", "env", "learner"], "kind"] == "fragment").all()
