"""One run on the dashboard page, whatever changes in it: which topics' events belong to
one run, and the totals over its stretches (pure: no scheduler, no browser)."""

from __future__ import annotations

from workbench.cluster.dashboard import WorkbenchPage
from workbench.cluster.dashboard_model import RUN_EVENT, STRETCH_EVENT, RunState, run_key
from workbench.cluster.report_events import report_event
from workbench.runtime.replicas.replica import TaskReport

STEPS = 256  # env steps a report counts


def _reports(group: str, iterations: range, t0: float) -> list[tuple[float, dict]]:
    return [
        (
            t0 + i,
            report_event(
                i,
                TaskReport(
                    group, 0, "0", env_steps={i: STEPS}, iterations=[i], compute_seconds={group.split("+")[0]: 0.01}
                ),
            ),
        )
        for i in iterations
    ]


def _stretch_of(key: str, iteration: int, ts: float) -> tuple[float, dict]:
    return ts, {RUN_EVENT: {"kind": STRETCH_EVENT, "message": key, "iteration": iteration}}


def test_a_later_stretch_names_the_run_it_continues():
    later = [_stretch_of("first", 169, 5.0)] + _reports("env", range(169, 171), 6.0)
    assert run_key("second", later) == "first"
    assert run_key("first", _reports("actor+env", range(3), 1.0)) == "first"


def test_a_re_placed_run_is_one_entry_with_the_whole_runs_totals():
    """Coarse until iteration 169, then re-placed (other groups): the page's one state
    counts every env step and every iteration, and the return curve starts at 0."""
    state = RunState("first")
    state.absorb(_reports("actor+env", range(169), 0.0) + _reports("learner", range(169), 0.0))
    state.absorb(
        [_stretch_of("first", 169, 200.0)]
        + _reports("env", range(169, 976), 200.0)
        + _reports("actor+learner", range(169, 976), 200.0)
    )
    assert state.env_steps == 2 * 976 * STEPS
    assert state.iterations_done == 976
    assert state.changed_at == [169] and state.run_events == []
    assert {s.group for s in state.current_replicas()} == {"env", "actor+learner"}
    assert state.elapsed == 975 + 200.0 - 0.0


def test_a_new_stretch_that_has_not_reported_keeps_the_count():
    state = RunState("first")
    state.absorb(_reports("actor+env", range(10), 0.0))
    state.absorb([_stretch_of("first", 10, 20.0)])
    assert state.iterations_done == 10


def test_the_page_shows_one_run_for_all_its_topics():
    class Scheduler:  # what the page reads of a scheduler: its topics and their events
        topics = {
            "workbench-first": _reports("actor+env", range(5), 0.0),
            "workbench-second": [_stretch_of("first", 5, 10.0)] + _reports("env", range(5, 9), 11.0),
        }

        def get_events(self, topic):
            return self.topics[topic]

        _broker = type("Broker", (), {"_topics": topics})()

    page = WorkbenchPage(Scheduler(), standalone=True)
    assert [value for value, _ in page.select.options] == ["first"]
    state = page.states["first"]
    assert state.env_steps == 9 * STEPS and state.iterations_done == 9
    assert "<b>9</b> iterations" in page.header.text and "changed while training at iteration 5" in page.header.text
