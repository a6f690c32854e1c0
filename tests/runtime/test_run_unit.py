"""``--unit``: what a run calls one env step (a language model's GRPO counts completions).
Every place that says it — the progress text, the summary, the live view's rate plot, the
HTML report, the dashboard page fed by a real cluster run's events — says the run's unit,
and the default reads as before; a bad name is refused before anything runs."""

from __future__ import annotations

import pytest

from tests.runtime.test_prog_bar import logging_loop
from workbench.config import RunConfig
from workbench.errors import RunConfigError
from workbench.progress import progress_text
from workbench.runtime.state.run import rate_label


@pytest.mark.parametrize("unit", ["completions", "agent steps"])
def test_the_progress_and_the_summary_say_the_runs_unit(unit):
    run = logging_loop().run(iterations=3, steps=2, unit=unit, progress=False)
    assert run.status == "finished", run.error
    rate = rate_label(unit)
    assert progress_text(run).split(" · ")[0].endswith(f" {rate}")
    assert f" {run.env_steps:,} {unit} in " in run.summary() and f" {rate}); " in run.summary()
    assert "env steps" not in run.summary() and "env-steps" not in progress_text(run)


def test_by_default_a_step_is_an_env_step():
    run = logging_loop().run(iterations=2, steps=2, progress=False)
    assert run.unit == "env steps" and "env-steps/s" in progress_text(run)
    assert f"{run.env_steps:,} env steps in" in run.summary()


@pytest.mark.parametrize("bad", ["", "   ", "a\nb", "x" * 41, 3])
def test_a_bad_unit_is_refused_by_its_flag(bad):
    with pytest.raises(RunConfigError, match="--unit"):
        RunConfig(unit=bad)


def test_the_run_line_takes_it():
    from workbench.config import parse_run_line

    assert parse_run_line("run --iterations 2 --unit completions")["unit"] == "completions"


def test_the_live_view_and_the_report_name_the_rate_after_the_unit(tmp_path):
    live = pytest.importorskip("workbench.widgets.live")
    views = []
    run = logging_loop().run(
        iterations=3,
        steps=2,
        unit="completions",
        progress=lambda total, label: views.append(live.LiveView(total, label)) or views[-1],
    )
    assert views[0].rate_plot.title.text == "completions/s"
    assert "completions/s" in views[0].label.value
    html = open(run.report(str(tmp_path / "profile.html"))).read()
    assert "completions/s" in html and "env-steps/s" not in html


def test_the_dashboard_page_names_the_steps_from_the_runs_events(client):
    """A cluster run announces its unit on its topic; the page's header, rate plot and
    replica table say it, and it is not listed as something that happened to the run."""
    from tests.cluster.test_report_events import _topic_events, _workbench_topics
    from workbench.cluster.dashboard import RunState, WorkbenchPage

    before = _workbench_topics(client)
    run = logging_loop().run(iterations=3, steps=2, policy="coarse", cluster=client, unit="completions", progress=False)
    (topic,) = _workbench_topics(client) - before
    state = RunState(topic)
    state.absorb(_topic_events(client, topic))
    assert state.unit == "completions" and state.run_events == []
    page = WorkbenchPage(None, standalone=True)
    page._refresh_header(state)
    page._refresh(state)
    assert f"<b>{run.env_steps:,}</b> completions" in page.header.text
    assert "completions/s (mean)" in page.header.text
    assert page.rate_fig.yaxis.axis_label == "completions/s" and page.rate_fig.title.text.startswith(
        "Completions per second"
    )
    assert page._steps_column.title == "completions"


def test_auto_names_its_measured_rates_after_the_unit(client, capsys):
    run = logging_loop().run(iterations=9, steps=2, policy="auto", cluster=client, unit="completions", progress=False)
    assert run.completed_iterations == 9, run.error
    printed = capsys.readouterr().out
    assert "policy auto measured (completions/s," in printed and "env-steps" not in printed
