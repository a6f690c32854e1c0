"""Reports: one msgpack ``bytes`` each, sent to the driver, relayed in batches to the page."""

from __future__ import annotations

import numpy as np

from workbench.cluster.dashboard import RunState
from workbench.cluster.report_events import report_event, report_fields
from workbench.runtime.replicas.replica import TaskReport


def _report() -> TaskReport:
    return TaskReport(
        "actor+env",
        3,
        "w3",
        metrics={7: {"loss": [0.5, 0.25]}},
        env_steps={7: 512},
        compute_seconds={"env": 0.02},
        wait_seconds=0.1,
        iterations=[7],
        sent_bytes=99,
        notes=[("state left out", "a note")],
    )


def test_a_packed_report_comes_back_field_for_field():
    event = report_event(12, _report())
    assert isinstance(event["report"], bytes) and event["task"] == 12
    back = TaskReport.from_message(report_fields(event))
    assert back == _report()


def test_a_report_msgpack_cannot_take_still_goes_as_a_dict():
    report = _report()
    report.metrics = {7: {"odd": [np.float16(1.5)]}}  # not a msgpack type
    event = report_event(1, report)
    assert isinstance(event["report"], dict)
    assert report_fields(event)["metrics"] == {"7": {"odd": [np.float16(1.5)]}}


def test_messages_that_are_not_reports_are_skipped():
    for message in (None, "text", {"task": 1}, {"report": b"\xc1not msgpack"}, {"report": 5}):
        assert report_fields(message) is None


def test_the_dashboard_page_absorbs_packed_and_unpacked_reports_alike():
    packed, plain = RunState("a"), RunState("b")
    events = [(100.0 + i, report_event(i, _report())) for i in range(3)]
    assert packed.absorb(events) == 3
    assert plain.absorb([(ts, {"task": e["task"], "report": report_fields(e)}) for ts, e in events]) == 3
    assert packed.replicas.keys() == plain.replicas.keys() == {("actor+env", 3)}
    a, b = packed.replicas[("actor+env", 3)], plain.replicas[("actor+env", 3)]
    assert (a.tasks, a.compute, a.sent_bytes) == (b.tasks, b.compute, b.sent_bytes) == (3, {"env": 0.06}, 297)


def _topic_events(client, topic: str) -> list:
    return client.run_on_scheduler(lambda dask_scheduler=None: list(dask_scheduler.get_events(topic)))


def _workbench_topics(client) -> set[str]:
    from workbench.cluster._dask_compat import workbench_topic_names

    return set(client.run_on_scheduler(lambda dask_scheduler=None: workbench_topic_names(dask_scheduler)))


def test_reports_reach_the_page_through_the_driver_each_exactly_once(client):
    """Replicas send their reports to the driver, which relays them to the run's scheduler
    topic in batches: no replica logs a Dask event of its own, and every report is on the
    topic once (the env steps it counts add up to the run's exact count), with the
    address of the worker that ran it."""
    from tests.conftest import toy_fdg

    before = _workbench_topics(client)
    run = toy_fdg().run(iterations=5, steps=2, policy="coarse", cluster=client, progress=False)
    (topic,) = _workbench_topics(client) - before
    events = _topic_events(client, topic)
    assert events and all(set(message) == {"batch"} for _, message in events)
    state = RunState(topic)
    absorbed = state.absorb(events)
    assert absorbed == sum(s.tasks for s in state.replicas.values()) > 0
    assert sum(s.env_steps for s in state.replicas.values()) == run.env_steps > 0
    addresses = set(client.run(lambda: None))
    assert {s.address for s in state.replicas.values()} <= addresses
    assert {s.last_iteration for s in state.replicas.values()} == {4}


def test_the_relay_passes_on_reports_msgpack_cannot_take(client):
    """A report with a NumPy scalar metric travels to the driver as a dict (pickled, exact);
    the relay packs it for the scheduler, which takes msgpack only."""
    from workbench.cluster.report_relay import ReportRelay

    odd = _report()
    odd.metrics = {7: {"odd": [np.float16(1.5)]}}
    topic = "workbench-relay-test"
    relay = ReportRelay(client, topic, every=60.0)  # nothing is sent before close
    relay.add(dict(report_event(1, _report()), worker="tcp://10.0.0.1:1"))
    relay.add(dict(report_event(2, odd), worker="tcp://10.0.0.1:1"))
    relay.close()
    events = _topic_events(client, topic)
    assert len(events) == 1  # one batch
    state = RunState("relay-test")
    assert state.absorb(events) == 2
    assert state.replicas[("actor+env", 3)].tasks == 2
    assert [report_fields(m)["metrics"] for _, m in events[0][1]["batch"]][1] == {"7": {"odd": [1.5]}}


def test_a_run_without_episodes_puts_its_prog_bar_metrics_on_the_page(client):
    """GRPO ends no episodes: the page's curve plots the first ``charts/`` metric logged with
    prog_bar=True, from the worker's reports, and its header gives each one's newest value."""
    from tests.runtime.test_prog_bar import logging_loop
    from workbench.cluster.dashboard import WorkbenchPage

    before = _workbench_topics(client)
    run = logging_loop().run(iterations=5, steps=2, policy="coarse", cluster=client, progress=False)
    (topic,) = _workbench_topics(client) - before
    state = RunState(topic)
    state.absorb(_topic_events(client, topic))
    assert state.shown == run.shown_metrics == ["charts/updates", "charts/every_third", "perf/actions_per_call"]
    assert state.curve_metric == "charts/updates"
    curve, points = state.return_curve()
    assert curve["iteration"] == [0, 1, 2, 3, 4] and curve["mean"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert state.headline()[:2] == [("charts/updates", 5.0), ("charts/every_third", 30.0)]
    page = WorkbenchPage(None, standalone=True)
    page._refresh_header(state)
    page._refresh(state)
    assert page.return_fig.title.text == "charts/updates: mean per iteration, min–max band"
    assert "updates 5 · every_third 30 · actions_per_call" in page.header.text
    assert "last return" not in page.header.text


def test_the_page_plots_the_return_once_episodes_end(client):
    from tests.runtime.test_prog_bar import logging_loop

    before = _workbench_topics(client)
    logging_loop(episodes_from=3).run(iterations=5, steps=2, policy="coarse", cluster=client, progress=False)
    (topic,) = _workbench_topics(client) - before
    state = RunState(topic)
    state.absorb(_topic_events(client, topic))
    assert state.curve_metric == "charts/episodic_return"
    assert state.return_curve()[0]["mean"] == [103.0, 104.0, 105.0]
