"""Learning curves of several runs on one Bokeh plot: :func:`compare`.

Per run, one line each; or grouped by a setting (``by="cfg.lr"``), one line per group —
the IQM across the group's runs at each point — in a band, the 95 % stratified-bootstrap
confidence interval (:mod:`workbench.run_store.stats`). Runs are put on a common x grid (the
range every run of the group reached) by linear interpolation.

    >>> cmp = wb.compare(by="cfg.lr")        # doctest: +SKIP
    >>> cmp            # in a notebook: the plot  # doctest: +SKIP
    >>> cmp.table      # group, x, iqm, lower, upper, runs  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.errors import MetricError
from workbench.run_store.listing import load_run, resolve_store, runs as list_runs
from workbench.run_store.stats import iqm, stratified_bootstrap_ci
from workbench.runtime.state.run import RETURN_METRIC, Run

__all__ = ["compare", "Comparison", "curves"]

#: the x axes a run's rows have
X_AXES = ("env_steps", "iteration", "time_s")
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


@dataclass
class Comparison:
    """What :func:`compare` made: the Bokeh ``figure`` and the numbers it shows (``table``:
    per run ``run, x, value``; grouped ``group, x, iqm, lower, upper, runs``)."""

    figure: Any
    table: Any

    def show(self) -> None:
        """Show the plot in the notebook (Bokeh's notebook output)."""
        from bokeh.io import output_notebook, show

        output_notebook(hide_banner=True)
        show(self.figure)

    def save(self, path: str | os.PathLike) -> str:
        """Write the plot as a self-contained HTML file (no network needed to view it)."""
        from bokeh.embed import file_html
        from bokeh.resources import INLINE

        with open(path, "w", encoding="utf-8") as fh:
            fh.write(file_html(self.figure, INLINE, title=self.figure.title.text or "workbench runs"))
        return os.fspath(path)

    def _ipython_display_(self) -> None:
        self.show()


def compare(
    runs=None,
    by: str | None = None,
    metric: str = RETURN_METRIC,
    x: str = "env_steps",
    *,
    store=None,
    strata: str | None = None,
    points: int = 100,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    title: str | None = None,
) -> Comparison:
    """Plot ``metric`` against ``x`` (``env_steps``, ``iteration``, ``time_s``) for ``runs``.

    ``runs``: None (every run in ``store``), a ``wb.runs()`` DataFrame (its rows), or a
    list of run ids, run folders, loaded runs or ``fdg.run`` results. ``by``: a setting the
    runs were made with — a notebook one (``"cfg.lr"``), a summary field (``"policy"``,
    ``"name"``) or a run option (``"steps"``) — to group runs by; each group is drawn as the
    IQM across its runs with its ``confidence`` interval from ``reps`` bootstrap resamples,
    stratified by the setting ``strata`` names (e.g. ``"cfg.env_id"``; default: one stratum).
    Raises :class:`~workbench.errors.MetricError` when a run has no ``metric``.
    """
    loaded = _load(runs, store)
    if not loaded:
        raise MetricError("no runs to compare: the run store holds none (or the list given is empty).")
    series = curves(loaded, metric, x)
    if by is None:
        table = _per_run(series)
    else:
        groups = _groups(loaded, by)
        table = _grouped(series, groups, _strata_of(loaded, strata), points, reps, confidence, seed)
    figure = _figure(table, by, metric, x, title or (f"{metric} by {by} (IQM, {confidence:.0%} CI)" if by else metric))
    return Comparison(figure, table)


def curves(
    runs: list[Run], metric: str = RETURN_METRIC, x: str = "env_steps"
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Label → ``(xs, values)`` of ``metric`` for each run, the iterations that logged it.
    A run without it raises :class:`~workbench.errors.MetricError` naming it and what it has."""
    if x not in X_AXES:
        raise MetricError(f"x must be one of {', '.join(X_AXES)}, got {x!r}.")
    found, lacking = {}, []
    for run in runs:
        label = _label(run)
        points = [(row[x], row[metric]) for row in run.rows if row.get(metric) is not None and x in row]
        if not points:
            lacking.append((label, sorted({k for row in run.rows for k in row} - {"iteration", *X_AXES})))
            continue
        xs, ys = np.array(points, dtype=float).T
        found[label] = (xs, ys)
    if lacking:
        logged = sorted({name for _, names in lacking for name in names})
        which = (
            f"none of the {len(lacking)} runs logged {metric!r}: nothing to compare"
            if not found
            else f"{len(lacking)} of the {len(runs)} runs ({', '.join(label for label, _ in lacking[:6])}"
            f"{' …' if len(lacking) > 6 else ''}) did not log {metric!r}"
        )
        raise MetricError(
            f"{which}. "
            f"{'They' if len(lacking) > 1 else 'It'} logged: {', '.join(logged) or 'nothing'}. "
            "Compare one of those (metric=…), or leave those runs out."
        )
    return found


# -- the numbers --------------------------------------------------------------------------
def _per_run(series) -> Any:
    import pandas as pd

    frames = [pd.DataFrame({"run": label, "x": xs, "value": ys}) for label, (xs, ys) in series.items()]
    return pd.concat(frames, ignore_index=True)


def _grouped(
    series, groups: dict[str, Any], strata: dict[str, Any], points: int, reps: int, confidence: float, seed: int
) -> Any:
    import pandas as pd

    frames = []
    for group in sorted(set(groups.values()), key=_sort_key):
        members = [label for label, value in groups.items() if value == group]
        lo = max(series[m][0].min() for m in members)
        hi = min(series[m][0].max() for m in members)
        if hi < lo:  # they reached no x in common: compare where the shortest ended
            lo = hi
        grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
        values = {m: np.interp(grid, *series[m]) for m in members}
        by_stratum: dict[Any, list[np.ndarray]] = {}
        for m in members:
            by_stratum.setdefault(strata.get(m), []).append(values[m])
        point, lower, upper = stratified_bootstrap_ci(
            [np.stack(v) for v in by_stratum.values()], iqm, reps=reps, confidence=confidence, seed=seed
        )
        frames.append(
            pd.DataFrame(
                {"group": str(group), "x": grid, "iqm": point, "lower": lower, "upper": upper, "runs": len(members)}
            )
        )
    return pd.concat(frames, ignore_index=True)


def _groups(runs: list[Run], by: str) -> dict[str, Any]:
    groups, missing = {}, []
    for run in runs:
        value = _setting(run, by)
        if value is None:
            missing.append(_label(run))
        groups[_label(run)] = value
    if missing:
        known = sorted({k for run in runs for k in _settings(run)})
        raise MetricError(
            f"by={by!r}: {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no such "
            f"setting; the runs have: {', '.join(known) or 'none'}."
        )
    return groups


def _strata_of(runs: list[Run], strata: str | None) -> dict[str, Any]:
    if strata is None:
        return {}
    return _groups(runs, strata)


def _settings(run) -> dict[str, Any]:
    """What ``by`` can name of ``run``: its run options, its summary, its notebook settings
    (a kept run's ``config`` dict; a run given a RunConfig as ``config``: its options)."""
    config = getattr(run, "config", None) or {}
    if dataclasses.is_dataclass(config):
        config = {"run": {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}}
    info = getattr(run, "info", None) or {}
    return {"policy": run.policy_name, **(config.get("run") or {}), **info, **(config.get("notebook") or {})}


def _setting(run, name: str):
    settings = _settings(run)
    if name in settings:
        return settings[name]
    return settings.get(name.removeprefix("run."))


def _label(run) -> str:
    return getattr(run, "id", None) or f"{run.policy_name} run {id(run):x}"


def _sort_key(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def _load(runs, store) -> list[Run]:
    if runs is None:
        runs = list_runs(store if store is not None else resolve_store(None))
    if hasattr(runs, "iterrows"):  # a wb.runs() DataFrame
        runs = list(runs["id"])
    if isinstance(runs, (str, os.PathLike, Run)):
        runs = [runs]
    return [run if isinstance(run, Run) else load_run(run, store=store, state=False) for run in runs]


# -- the plot -----------------------------------------------------------------------------
def _figure(table, by, metric: str, x: str, title: str):
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    fig = figure(
        title=title,
        height=380,
        sizing_mode="stretch_width",
        x_axis_label=x.replace("_", " "),
        y_axis_label=metric,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    key = "group" if by else "run"
    for i, (label, part) in enumerate(table.groupby(key, sort=False)):
        color = _PALETTE[i % len(_PALETTE)]
        source = ColumnDataSource({column: part[column].to_numpy() for column in part.columns if column != key})
        if by:
            fig.varea(
                x="x",
                y1="lower",
                y2="upper",
                source=source,
                fill_color=color,
                fill_alpha=0.2,
                legend_label=f"{by}={label}",
            )
            fig.line(x="x", y="iqm", source=source, color=color, line_width=2, legend_label=f"{by}={label}")
        else:
            fig.line(x="x", y="value", source=source, color=color, line_width=2, legend_label=str(label))
    fig.add_tools(HoverTool(tooltips=[("x", "@x{0,0}"), ("value", "@iqm{0.00}" if by else "@value{0.00}")]))
    fig.legend.location = "top_left"
    fig.legend.click_policy = "hide"
    return fig
