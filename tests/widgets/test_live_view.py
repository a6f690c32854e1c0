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
