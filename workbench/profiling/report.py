"""A run's self-contained HTML report: bokeh plots with bokeh's JavaScript inlined
(``bokeh.resources.INLINE``, its core bundle: the report uses no widgets), so the file opens offline and fetches nothing.

Bokeh's bundle carries URLs in code paths this report never takes (the MathJax and Google
Maps loaders, the toolbar logo and help links, icon fonts, licence comments). The report
rewrites every ``http(s)://`` in the file to ``about:blank#…`` except the XML namespace
names of :data:`ALLOWED_URLS`, which are identifiers that browsers never fetch.
"""

from __future__ import annotations

import html
import os
import re

__all__ = ["write_report", "ALLOWED_URLS", "URL_PATTERN"]

#: XML namespace names (identifiers, never fetched) the bokeh bundle uses
ALLOWED_URLS = (
    "http://www.w3.org/2000/svg",
    "http://www.w3.org/1999/xhtml",
    "http://www.w3.org/1998/Math/MathML",
    "http://www.w3.org/1999/xlink",
)
URL_PATTERN = re.compile(r"https?://")
_NOT_ALLOWED = re.compile(r"https?://(?!(?:%s)\b)" % "|".join(re.escape(u.split("://", 1)[1]) for u in ALLOWED_URLS))

_PALETTE = [
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
    "#ccb974",
    "#64b5cd",
]


def _figure(title: str, x_label: str, y_label: str, **kw):
    from bokeh.plotting import figure

    p = figure(
        title=title,
        width=620,
        height=300,
        tools="pan,wheel_zoom,box_zoom,reset,save,hover",
        x_axis_label=x_label,
        y_axis_label=y_label,
        **kw,
    )
    p.toolbar.logo = None
    return p


def _plots(run):
    from bokeh.models import ColumnDataSource
    from workbench.profiling.accounting import KINDS, _columns, profile
    from workbench.config import rate_label

    rows = run.rows
    it = [r["iteration"] for r in rows]
    plots = []

    unit = run.unit
    ret = _figure("episodic return", unit, "return")
    name = "charts/episodic_return"
    pts = [(r["env_steps"], r[name]) for r in rows if name in r]
    if pts:
        ret.scatter([p[0] for p in pts], [p[1] for p in pts], size=4, alpha=0.5, legend_label="iteration mean")
    mean_col = f"charts/mean_return_last_{run.window}"
    pts = [(r["env_steps"], r[mean_col]) for r in rows if r.get(mean_col) is not None]
    if pts:
        ret.line(
            [p[0] for p in pts],
            [p[1] for p in pts],
            line_width=2,
            color="#c44e52",
            legend_label=f"mean of last {run.window} episodes",
        )
    if run.target_return is not None:
        ret.line(
            [rows[0]["env_steps"], rows[-1]["env_steps"]],
            [run.target_return] * 2,
            line_dash="dashed",
            color="grey",
            legend_label="target",
        )
    ret.legend.location = "bottom_right"
    plots.append(ret)

    sps = _figure("throughput", "iteration", rate_label(unit))
    prev_t, prev_s, inst = 0.0, 0, []
    for r in rows:
        dt = r["time_s"] - prev_t
        inst.append((r["env_steps"] - prev_s) / dt if dt > 0 else 0.0)
        prev_t, prev_s = r["time_s"], r["env_steps"]
    sps.line(it, inst, legend_label="this iteration")
    sps.line(it, [r["charts/SPS"] for r in rows], color="#dd8452", line_width=2, legend_label="since start")
    sps.legend.location = "bottom_right"
    plots.append(sps)

    fragments, replicas = _columns(rows)
    if fragments:
        src = {"iteration": it}
        for f in fragments:
            src[f] = [r.get(f"time/{f}_compute_s", 0.0) for r in rows]
        frag = _figure("compute per fragment (summed over replicas)", "iteration", "seconds")
        frag.vbar_stack(
            fragments,
            x="iteration",
            width=0.9,
            source=ColumnDataSource(src),
            color=[_PALETTE[i % len(_PALETTE)] for i in range(len(fragments))],
            legend_label=fragments,
        )
        frag.legend.location = "top_left"
        plots.append(frag)
    if replicas:
        df = profile(run)
        per = df[df["kind"] == "replica"]
        src = {"replica": list(per.index)}
        for k in KINDS:
            src[k] = list(per[f"{k}_s_per_it"])
        rep = _figure("time per iteration per group replica (mean)", "seconds", "", y_range=list(per.index))
        rep.hbar_stack(
            list(KINDS),
            y="replica",
            height=0.7,
            source=ColumnDataSource(src),
            color=_PALETTE[: len(KINDS)],
            legend_label=list(KINDS),
        )
        rep.legend.location = "bottom_right"
        plots.append(rep)

    wire = _figure("bytes on the wire per iteration", "iteration", "bytes")
    wire.vbar(x=it, top=[r.get("wire/bytes", 0) for r in rows], width=0.9)
    plots.append(wire)
    return plots


def _events_html(run) -> str:
    """What happened to the run (lost workers, re-placements, edits), each event's line as
    the run said it; nothing when nothing happened."""
    events = getattr(run, "events", ())
    if not events:
        return ""
    items = "".join(
        f"<li><b>{html.escape(e.kind)}</b>"
        + (f" (iteration {e.iteration})" if e.iteration is not None else "")
        + f": {html.escape(e.message)}</li>"
        for e in events
    )
    return f'<h2>events</h2><ul class="events">{items}</ul>\n'


def write_report(run, path: str | os.PathLike = "profile.html") -> str:
    """Write ``run``'s report to ``path``; return the path."""
    from bokeh.embed import components
    from bokeh.layouts import gridplot
    from bokeh.resources import INLINE

    from workbench.profiling.accounting import profile

    body = ["<p><i>no iterations finished</i></p>"]
    scripts = ""
    if run.rows:
        grid = gridplot(_plots(run), ncols=2)
        script, div = components(grid)
        scripts, body = script, [div]
        table = profile(run).to_html(float_format=lambda v: f"{v:.4g}", na_rep="", border=0)
        body.append(f"<h2>profile</h2>{table}")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>workbench run — {html.escape(run.policy_name)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} pre{{background:#f6f6f6;padding:.8em}}
table{{border-collapse:collapse;font-size:13px}} td,th{{padding:2px 8px;text-align:right}}
tr:nth-child(even){{background:#f4f4f4}}</style>
{INLINE.clone(components=["bokeh"]).render()}
{scripts}
</head><body>
<h1>workbench run</h1>
<p>{html.escape(run.summary())}</p>
{_events_html(run)}<h2>plan</h2><pre>{html.escape(run.plan_text or "(no plan)")}</pre>
{"".join(body)}
</body></html>
"""
    page = _NOT_ALLOWED.sub("about:blank#", page)
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
