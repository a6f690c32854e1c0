"""Draw an FDG as SVG: fragments as boxes, interfaces as labelled arrows.

Fragments sit in one row, in the order the loop runs them (step fragments first, then the
iteration-only ones). Arrows above the row run left to right, arrows below run right to
left; each arrow carries the names it moves and how (every step, stacked, latest…).
Colours follow the timing, so per-step traffic stands out from per-iteration traffic.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("actor", "a = o", rate="step")
    >>> _ = fdg.add_fragment("env", "o = a", rate="step", writes=())
    >>> render_svg(fdg).startswith("<svg")
    True
"""
from __future__ import annotations

import html
from collections import defaultdict

from workbench.fdg.graph import Graph
from workbench.fdg.vocabulary import TIMINGS

__all__ = ["render_svg", "render_html"]

_COLOURS = {
    "per-step": "#d6604d",
    "stacked": "#4393c3",
    "latest": "#5aae61",
    "per-iteration": "#5aae61",
    "once": "#999999",
}
_BOX_W, _BOX_H, _GAP, _LANE = 170, 74, 110, 30
_RATE_WORDS = {"init": "init", "step": "every step", "iteration": "every iteration"}


def _order(fdg: Graph) -> list[str]:
    try:
        steps = list(fdg.schedule().step_order)
    except Exception:  # a graph under construction may not schedule yet: draw it anyway
        steps = [n for n, f in fdg.fragments.items() if "step" in f.cells]
    return steps + [n for n in fdg.fragments if n not in steps]


def render_svg(fdg: Graph) -> str:
    """The FDG as a standalone SVG document (no scripts, no external resources)."""
    names = _order(fdg)
    if not names:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="320" height="40">'
                '<text x="10" y="25" font-family="sans-serif" font-size="13">empty FDG: '
                'register cells with %%fragment NAME</text></svg>')
    x_of = {n: 20 + i * (_BOX_W + _GAP) for i, n in enumerate(names)}
    edges: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for e in fdg.interfaces:
        label_list = edges[(e.producer, e.consumer, e.timing)]
        if e.name not in label_list:
            label_list.append(e.name)
    def span(item):
        return abs(names.index(item[0][0]) - names.index(item[0][1]))

    # shorter arcs nearer the boxes, so arcs nest instead of crossing
    forward = sorted(((k, v) for k, v in edges.items() if names.index(k[0]) < names.index(k[1])), key=span)
    backward = sorted(((k, v) for k, v in edges.items() if names.index(k[0]) > names.index(k[1])), key=span)
    top = 30 + _LANE * len(forward)
    width = 40 + len(names) * _BOX_W + (len(names) - 1) * _GAP
    height = top + _BOX_H + _LANE * len(backward) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           '<defs>' + "".join(
               f'<marker id="wb-arrow-{t}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
               f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
               for t, c in _COLOURS.items()) + '</defs>']
    for lane, ((src, dst, timing), labels) in enumerate(forward):
        y = top - _LANE * (lane + 1) + 8
        out.append(_arrow(x_of[src] + _BOX_W * 0.65, top, x_of[dst] + _BOX_W * 0.35, top, y, timing, labels))
    for lane, ((src, dst, timing), labels) in enumerate(backward):
        y = top + _BOX_H + _LANE * (lane + 1) - 4
        out.append(_arrow(x_of[src] + _BOX_W * 0.35, top + _BOX_H, x_of[dst] + _BOX_W * 0.65,
                          top + _BOX_H, y, timing, labels))
    for name in names:
        out.append(_box(fdg, name, x_of[name], top))
    legend_y = height - 14
    x = 20
    for timing, colour in (("per-step", _COLOURS["per-step"]), ("stacked", _COLOURS["stacked"]),
                           ("latest", _COLOURS["latest"]), ("once", _COLOURS["once"])):
        out.append(f'<rect x="{x}" y="{legend_y - 9}" width="12" height="4" fill="{colour}"/>'
                   f'<text x="{x + 16}" y="{legend_y - 4}" font-size="11" fill="#555">'
                   f'{html.escape(TIMINGS[timing])}</text>')
        x += 40 + 6 * len(TIMINGS[timing])
    out.append("</svg>")
    return "".join(out)


def _arrow(x1, y1, x2, y2, y_mid, timing, labels) -> str:
    colour = _COLOURS[timing]
    path = f"M{x1:.0f},{y1} C{x1:.0f},{y_mid} {x2:.0f},{y_mid} {x2:.0f},{y2}"
    text = html.escape(", ".join(labels))
    mid_x = (x1 + x2) / 2
    label_y = y_mid + (4 if y_mid < y1 else 10)
    return (f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2" '
            f'marker-end="url(#wb-arrow-{timing})"><title>{html.escape(TIMINGS[timing])}</title></path>'
            f'<text x="{mid_x:.0f}" y="{label_y:.0f}" font-size="12" text-anchor="middle" fill="{colour}" '
            f'stroke="white" stroke-width="3" paint-order="stroke">{text}</text>')


def _box(fdg: Graph, name: str, x: float, y: float) -> str:
    frag = fdg[name]
    rates = " · ".join(_RATE_WORDS[r] for r in frag.rates)
    extra = []
    if frag.replicas:
        extra.append(f"×{frag.replicas}")
    if frag.device != "cpu":
        extra.append(frag.device)
    sub = html.escape(" ".join(extra))
    return (f'<g><rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="10" fill="#f7f7f7" '
            f'stroke="#333" stroke-width="1.5"/>'
            f'<text x="{x + _BOX_W / 2}" y="{y + 28}" font-size="17" font-weight="bold" '
            f'text-anchor="middle">{html.escape(name)}</text>'
            f'<text x="{x + _BOX_W / 2}" y="{y + 48}" font-size="11" text-anchor="middle" '
            f'fill="#555">{html.escape(rates)}</text>'
            f'<text x="{x + _BOX_W / 2}" y="{y + 64}" font-size="11" text-anchor="middle" '
            f'fill="#555">{sub}</text></g>')


def render_html(fdg: Graph) -> str:
    """The drawing plus a table of interfaces, for a notebook's rich display."""
    rows = "".join(
        f"<tr><td>{html.escape(e.producer)} → {html.escape(e.consumer)}</td>"
        f"<td><code>{html.escape(e.name)}</code></td><td>{html.escape(TIMINGS[e.timing])}</td></tr>"
        for e in fdg.interfaces
    )
    table = (f"<details><summary>{len(fdg.interfaces)} interfaces</summary>"
             f"<table><tr><th>edge</th><th>name</th><th>when</th></tr>{rows}</table></details>")
    return f'<div class="workbench-fdg">{render_svg(fdg)}{table}</div>'
