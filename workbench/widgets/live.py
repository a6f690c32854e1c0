"""The live view of a run in a notebook: progress, and Bokeh plots of the return and of
env-steps/s that update every iteration. A run that finishes no episodes (GRPO) plots the
first metric its cells log with ``wb.log(…, prog_bar=True)`` instead of the return.

It is an ipywidgets box (a progress bar plus a ``jupyter_bokeh`` BokehModel), so updates
travel over the kernel's widget channel: no Bokeh server, nothing fetched from a CDN
(BokehJS comes with the jupyter_bokeh extension). Outside a notebook, runs use a text
progress bar instead.

The plots go one way, kernel to page: the run's thread is the only writer of their Bokeh
document (see :class:`OneWayBokehModel`).

Example (in a notebook; ``fdg.run`` does this for you):
    >>> view = LiveView(total=100, title="SingleLearnerCoarse")     # doctest: +SKIP
    >>> view.update(run)                                            # doctest: +SKIP
"""

from __future__ import annotations

import time

import ipywidgets as widgets
from bokeh.layouts import row
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure
from jupyter_bokeh.widgets import BokehModel

from workbench.progress import progress_text
from workbench.widgets.notices import NOTICE_STYLE
from workbench.runtime.state.run import rate_label

__all__ = ["LiveView", "OneWayBokehModel"]

#: the plots redraw at most this often (a fast run finishes iterations in milliseconds)
MIN_REDRAW_SECONDS = 0.25
#: the first plot's title while it shows the return
RETURN_TITLE = "mean return (last 20 episodes)"


class OneWayBokehModel(BokehModel):
    """jupyter_bokeh's widget, drawing only: what the page sends back is not applied.

    BokehJS sends every change it makes back to the kernel (the plot's measured sizes, its
    auto-ranges, and echoes of the very rows the kernel streamed), and jupyter_bokeh applies
    them to the document on the thread that reads the page's messages (an ipykernel subshell
    in JupyterLab), while the run's thread streams the next rows into the same
    ``ColumnDataSource``. Bokeh's documents are not thread-safe: replacing a source's
    ``data`` there while it is streamed here raised "Set changed size during iteration" in
    the run's thread and ended the run. Nothing in the kernel reads those values back (the
    plots have no tools), so the page's changes stay in the page.
    """

    def _sync_model(self, _model, _content, _buffers) -> None:
        return None


class LiveView:
    """Progress plus live return and throughput plots for one run."""

    def __init__(self, total: int, title: str) -> None:
        self.total = total
        # bar and label share one line: the label takes what the bar leaves and truncates
        # with an ellipsis (its whole text in the tooltip), never wrapping under the bar
        self.progress = widgets.IntProgress(
            value=0,
            min=0,
            max=total,
            description="training",
            layout=widgets.Layout(width="auto", flex="0 1 55%", min_width="180px"),
        )
        self.label = widgets.HTML(
            self._label_text(0, title, ""), layout=widgets.Layout(flex="1 1 0%", min_width="0", overflow="hidden")
        )
        self.title = title
        self.returns = ColumnDataSource({"iteration": [], "mean": []})
        self.rates = ColumnDataSource({"time": [], "sps": []})
        ret = figure(height=220, width=420, title=RETURN_TITLE, x_axis_label="iteration", toolbar_location=None)
        self.first_plot = ret
        #: the metric the first plot shows: the mean return, or a prog_bar metric while no episode ended
        self.series: str | None = None
        ret.line("iteration", "mean", source=self.returns, line_width=2, color="#5aae61")
        sps = figure(height=220, width=420, title="env-steps/s", x_axis_label="seconds", toolbar_location=None)
        sps.line("time", "sps", source=self.rates, line_width=2, color="#4393c3")
        self.rate_plot = sps  # titled after the run's unit at the first update
        self.plots = OneWayBokehModel(row(ret, sps))
        #: what happened to the run (edits landing, updates, re-placements, lost workers):
        #: a background run's thread cannot print into a finished cell (Jupyter drops it),
        #: so the view, which stays on the page, says it
        self.events = widgets.HTML("")
        #: the newest clip of the agent (``--video-every``), once there is one
        self.clip_view = widgets.HTML("")
        line = widgets.HBox([self.progress, self.label], layout=widgets.Layout(flex_flow="row nowrap", width="100%"))
        self.widget = widgets.VBox([line, self.plots, self.events, self.clip_view])
        self._shown = 0
        self._events_shown = 0
        self._last_draw = 0.0

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @staticmethod
    def _label_text(done: int, title: str, extra: str) -> str:
        import html

        text = html.escape(f"{title} · {done} it {extra}".rstrip())
        # width 0, at least the whole line: the text never widens the label (so it is cut
        # with an ellipsis instead of pushing the label under the bar)
        return (
            f"<div class='wb-progress-label' title='{text}' style='font-family:monospace;width:0;"
            f"min-width:100%;white-space:nowrap;overflow:hidden;text-overflow:ellipsis'>{text}</div>"
        )

    def advance(self, run) -> None:
        """One more iteration finished (the runner's progress protocol)."""
        self.update(run)

    def finish(self, run) -> None:
        self.close(run)

    def update(self, run, *, force: bool = False) -> None:
        """Show the run's newest iterations (throttled; ``force`` draws now)."""
        done = len(run.rows)
        self.progress.value = min(done, self.total)
        now = time.monotonic()
        if not force and now - self._last_draw < MIN_REDRAW_SECONDS:
            return
        self._last_draw = now
        rows = run.rows[self._shown :]
        self._shown = done
        self.label.value = self._label_text(done, self.title, f"· {progress_text(run)}" if run.rows else "")
        returns = f"charts/mean_return_last_{run.window}"
        series = returns if run.episode_returns else (run.shown_metrics[0] if run.shown_metrics else None)
        plotted = rows
        if series is not None and series != self.series and self.series != returns:
            # the first choice, or the return once episodes end: redrawn from the first row
            self.series, plotted = series, run.rows
            self.first_plot.title.text = RETURN_TITLE if series == returns else series
            self.returns.data = {"iteration": [], "mean": []}
        fresh = [(r["iteration"], r.get(self.series)) for r in plotted] if self.series else []
        fresh = [(i, m) for i, m in fresh if m is not None]
        if fresh:
            self.returns.stream({"iteration": [i for i, _ in fresh], "mean": [m for _, m in fresh]})
        if rows:
            self.rate_plot.title.text = rate_label(run.unit)
            self.rates.stream({"time": [r["time_s"] for r in rows], "sps": [r["charts/SPS"] for r in rows]})
        if len(run.events) != self._events_shown:
            self._events_shown = len(run.events)
            self.events.value = events_html(run.events)

    def clip(self, clip) -> None:
        """Show the newest clip of the agent (a :class:`workbench.training_clips.Clip`) under the plots."""
        import html

        self.clip_view.value = (
            f"<div class='wb-clip' style='{NOTICE_STYLE}'><b>the agent at {html.escape(clip.caption())}</b>"
            f"{clip.video.to_html()}</div>"
        )

    def close(self, run) -> None:
        self.update(run, force=True)
        self.progress.bar_style = "success" if run.status in ("finished", "solved") else "warning"


#: the newest events the view lists (all are in ``run.events``)
EVENTS_SHOWN = 6


def events_html(events) -> str:
    """The run's newest events, one line each: ``iteration 15 · edited · learner: …``.

    >>> from workbench.runtime.state.run import RunEvent
    >>> print(events_html([RunEvent("edited", "learner: new iteration cell", 15)]))
    <div style='font-family:monospace;font-size:12px;word-break:normal;overflow-wrap:anywhere'>iteration 15 · edited · learner: new iteration cell</div>
    """
    import html

    lines = [
        f"{'' if e.iteration is None else f'iteration {e.iteration} · '}{e.kind} · {html.escape(e.message)}"
        for e in list(events)[-EVENTS_SHOWN:]
    ]
    return f"<div style='{NOTICE_STYLE}'>" + "<br>".join(lines) + "</div>" if lines else ""
