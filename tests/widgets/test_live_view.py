"""The live view that %fdg run shows: its plots receive every iteration."""

from __future__ import annotations

import pytest

from tests.conftest import toy_fdg

live = pytest.importorskip("workbench.widgets.live")


def test_live_view_streams_throughput_and_return_each_iteration():
    views = []

    def factory(total, label):
        views.append(live.LiveView(total, label))
        return views[-1]

    fdg = toy_fdg()
    run = fdg.run(iterations=30, steps=5, progress=factory)
    view = views[0]
    assert view.progress.value == 30 and view.progress.max == 30
    assert view.rates.data["sps"] and len(view.rates.data["time"]) == 30  # forced final draw
    assert view.returns.data["iteration"][-1] == 29
    assert view.progress.bar_style == "success" and run.status == "finished"
    assert "env-steps/s" in view.label.value


def test_the_magic_uses_the_live_view(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    magics = ip.magics_manager.registry["WorkbenchMagics"]
    magics.fdg.clear()
    ip.run_cell("import numpy as np\nimport workbench as wb")
    for cell in (
        "%%fragment env --init\nobs = np.zeros(2)\n",
        "%%fragment actor\naction = obs + 1\n",
        "%%fragment env\nobs = action * 0.5\nreward = action.sum()\n",
        "%%fragment learner\nseen = reward.shape[0]\n",
    ):
        assert ip.run_cell(cell).success
    run = ip.run_line_magic("fdg", "run --iterations 2 --steps 2")
    assert run.status == "finished"
    assert "VBox" in capsys.readouterr().out  # the widget box was displayed
    magics.fdg.clear()


def test_the_live_view_lists_what_happened_to_the_run():
    """A background run's landing notices cannot print into a finished cell: the view says them."""
    views = []

    def factory(total, label):
        views.append(live.LiveView(total, label))
        return views[-1]

    fdg = toy_fdg()
    run = fdg.run(iterations=3, steps=2, progress=factory)
    assert views[0].events.value == ""  # nothing happened
    run.note("edited", "learner: new iteration cell, applied from iteration 2", 2)
    views[0].close(run)
    assert "iteration 2 · edited · learner: new iteration cell, applied from iteration 2" in views[0].events.value


def _viewed(fdg, iterations):
    views = []

    def factory(total, label):
        views.append(live.LiveView(total, label))
        return views[-1]

    run = fdg.run(iterations=iterations, steps=2, progress=factory)
    return run, views[0]


def test_a_run_without_episodes_plots_its_first_prog_bar_metric():
    """GRPO finishes no episodes: the first plot shows what its cells log with prog_bar=True."""
    from tests.runtime.test_prog_bar import logging_loop

    run, view = _viewed(logging_loop(), 6)
    assert view.first_plot.title.text == "charts/updates"
    assert view.returns.data["iteration"] == list(range(6)) and view.returns.data["mean"] == [1, 2, 3, 4, 5, 6]
    assert "updates 6 · every_third 60" in view.label.value and "return" not in view.label.value
    assert len(view.rates.data["sps"]) == 6  # the throughput plot as before


def test_the_plot_turns_to_the_return_once_episodes_end():
    """Returns from the 4th update on: the return replaces the prog_bar metric, from its first value."""
    from tests.runtime.test_prog_bar import logging_loop

    run, view = _viewed(logging_loop(episodes_from=4), 6)
    assert view.first_plot.title.text == live.RETURN_TITLE
    assert view.returns.data["iteration"] == [3, 4, 5]
    assert view.returns.data["mean"] == [104.0, 104.5, 105.0]  # the mean return so far, per iteration
    assert "return 105" in view.label.value


def _from_the_page(source_id: str, plot_id: str, iteration: int) -> list[dict]:
    """What BokehJS sends back after drawing a streamed row (as a real JupyterLab page sent
    it): its measured size, the source's ``data`` reset, and an echo of the row."""
    events = [
        {"kind": "ModelChanged", "model": {"id": plot_id}, "attr": "inner_width", "new": 377 + iteration % 3},
        {
            "kind": "ModelChanged",
            "model": {"id": source_id},
            "attr": "data",
            "new": {"type": "map", "entries": [["iteration", []], ["mean", []]]},
        },
        {
            "kind": "ColumnsStreamed",
            "model": {"id": source_id},
            "attr": "data",
            "data": {"type": "map", "entries": [["iteration", [iteration]], ["mean", [1.0]]]},
            "rollover": None,
        },
    ]
    return [
        {"content": {"data": {"method": "custom", "content": {**e, "event": "jsevent"}}}, "buffers": []} for e in events
    ]


def test_what_the_page_sends_back_leaves_the_runs_plots_alone():
    """The page's messages arrive on another thread than the run's (an ipykernel subshell):
    applied there, a ``data`` reset racing the run's stream raised "Set changed size during
    iteration" in the run's thread and ended the run. The plots are drawn one way."""
    import threading

    from workbench.runtime.engine.driver import IterationRecord
    from workbench.runtime.state.run import Run

    view = live.LiveView(total=10_000, title="inline")
    run = Run(policy_name="inline", iterations=10_000, steps=1)
    source, plot = view.returns, view.first_plot
    page_errors: list[BaseException] = []
    streamed = threading.Event()

    def page() -> None:
        i = 0
        while not streamed.is_set():
            for msg in _from_the_page(source.id, plot.id, i):
                try:
                    view.plots._handle_msg(msg)
                except Exception as exc:  # noqa: BLE001 — said by the assertion below
                    page_errors.append(exc)
            i += 1

    reader = threading.Thread(target=page)
    reader.start()
    try:
        for i in range(300):
            run.record(IterationRecord(i, metrics={"charts/reward_mean": [float(i)]}, shown=["charts/reward_mean"]))
            view.update(run, force=True)
    finally:
        streamed.set()
        reader.join()
    assert page_errors == []
    assert source.data["iteration"] == list(range(300)), "the page's echoes changed what the run streamed"
    with pytest.raises(ValueError, match="inner_width doesn't have a value set"):
        plot.inner_width  # noqa: B018 — the page's measurements stay in the page
