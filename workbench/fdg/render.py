"""Draw an FDG as SVG: fragments as boxes, interfaces as labelled arrows.

Fragments sit in one row, in the order the loop runs them (step fragments first, then the
iteration-only ones), each box as wide as its texts. Arrows above the row run left to
right, arrows below run right to left; each arrow carries the names it moves (wrapped to
its span, just beyond its apex) and how (every step, stacked, latest…). Arcs nest: the
shorter nearer the boxes, each raised until it crosses no label and its label touches no
arc (:func:`_lay_out`). Colours follow the timing, so per-step traffic stands out from
per-iteration traffic.

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
_BOX_MIN_W, _BOX_H, _GAP, _PAD = 150, 74, 110, 14
_RATE_WORDS = {"init": "init", "step": "every step", "iteration": "every iteration"}
#: an arc's label: font size, line height, clearance from its arc and from other drawing
_LABEL_PX, _LINE_PX, _LABEL_GAP, _CLEAR = 12, 14, 4, 3
#: the lowest an arc rises above (or sinks below) the boxes, and the step the layout raises it by
_RISE_MIN, _RISE_STEP, _RISE_GIVE_UP = 22, 4, 240


def text_width(text: str, size: float, bold: bool = False) -> float:
    """A generous estimate of ``text``'s width in a sans-serif font of ``size`` px (no font
    metrics here): boxes and label room sized by it hold the text in common fonts.

    >>> text_width("every step", 11) < text_width("every iteration", 11)
    True
    """
    return len(text) * size * (0.64 if bold else 0.6)


def _order(fdg: Graph) -> list[str]:
    try:
        steps = list(fdg.schedule().step_order)
    except Exception:  # a graph under construction may not schedule yet: draw it anyway
        steps = [n for n, f in fdg.fragments.items() if "step" in f.cells]
    return steps + [n for n in fdg.fragments if n not in steps]


def _box_lines(fdg: Graph, name: str) -> tuple[str, str]:
    frag = fdg[name]
    extra = [f"×{frag.replicas}"] if frag.replicas else []
    if frag.device != "cpu":
        extra.append(frag.device)
    return " · ".join(_RATE_WORDS[r] for r in frag.rates), " ".join(extra)


def _box_width(fdg: Graph, name: str) -> float:
    """Wide enough for the fragment's name and its rates (never less than the usual box)."""
    rates, sub = _box_lines(fdg, name)
    widest = max(text_width(name, 17, bold=True), text_width(rates, 11), text_width(sub, 11))
    return max(_BOX_MIN_W, round(widest + 2 * _PAD))


def _wrap(labels: list[str], width: float) -> list[str]:
    """The names on lines of at most ``width`` px (a name longer than that has a line of its own)."""
    lines: list[str] = []
    for name in labels:
        joined = f"{lines[-1]}, {name}" if lines else name
        if lines and text_width(joined + ",", _LABEL_PX) <= width:
            lines[-1] = joined
        else:
            if lines:
                lines[-1] += ","
            lines.append(name)
    return lines


class _Arc:
    """One arrow between two boxes' anchors, above the row (``up``) or below it, with its
    label just outside its apex; ``rise`` is how far the apex is from the boxes' edge."""

    def __init__(self, x1: float, x2: float, up: bool, timing: str, labels: list[str]) -> None:
        self.x1, self.x2, self.up, self.timing = x1, x2, up, timing
        self.lines = _wrap(labels, max(60.0, abs(x2 - x1) - 12))
        self.width = max(text_width(line, _LABEL_PX) for line in self.lines)
        self.rise = _RISE_MIN
        self.shift = 0.0  # the label's offset from the middle of the span

    @property
    def reach(self) -> float:
        """How far the arc and its label extend from the boxes' edge."""
        return self.rise + _LABEL_GAP + _LINE_PX * len(self.lines)

    def points(self, n: int | None = None) -> list[tuple[float, float]]:
        """Points along the curve (a few px apart), y measured away from the boxes (0: their edge)."""
        n = n or max(48, int(abs(self.x2 - self.x1) + 2 * self.rise) // 2)
        ctrl = self.rise / 0.75  # a cubic with both control points at ctrl peaks at 0.75·ctrl
        out = []
        for i in range(n + 1):
            t = i / n
            a, b = 3 * t * t - 2 * t**3, 3 * t * (1 - t)
            out.append((self.x1 + (self.x2 - self.x1) * a, ctrl * b))
        return out

    def label_box(self) -> tuple[float, float, float, float]:
        """(left, near, right, far) of the label, y away from the boxes like :meth:`points`."""
        mid = (self.x1 + self.x2) / 2 + self.shift
        near = self.rise + _LABEL_GAP
        return mid - self.width / 2, near, mid + self.width / 2, near + _LINE_PX * len(self.lines)

    def shifts(self) -> list[float]:
        """Where the label may sit along the arc: centred, else moved either way, inside its span."""
        room = max(0.0, (abs(self.x2 - self.x1) - self.width) / 2)
        steps = int(room // _RISE_STEP)
        return [0.0] + [sign * k * _RISE_STEP for k in range(1, steps + 1) for sign in (1, -1)]


def _hits(box: tuple[float, float, float, float], points) -> bool:
    left, near, right, far = box
    return any(left - _CLEAR <= x <= right + _CLEAR and near - _CLEAR <= y <= far + _CLEAR for x, y in points)


def _overlap(a, b) -> bool:
    return not (a[2] + _CLEAR < b[0] or b[2] + _CLEAR < a[0] or a[3] + _CLEAR < b[1] or b[3] + _CLEAR < a[1])


def _place_label(arc: _Arc, others: list[_Arc]) -> bool:
    """Move ``arc``'s label along its arc to the first place clear of every other arc and
    label; False (the label as it was) when there is none."""
    was = arc.shift
    for shift in arc.shifts():
        arc.shift = shift
        box = arc.label_box()
        if not any(_hits(box, o.points()) or _overlap(box, o.label_box()) for o in others if o is not arc):
            return True
    arc.shift = was
    return False


def _settles(arc: _Arc, placed: list[_Arc]) -> bool:
    """Whether ``arc`` at its rise crosses no placed label (moving those it would cross
    along their arcs) and its label finds a clear place."""
    mine = arc.points()
    for other in placed:
        if _hits(other.label_box(), mine) and not _place_label(other, placed + [arc]):
            return False
    return _place_label(arc, placed)


def _lay_out(arcs: list[_Arc]) -> None:
    """Raise each arc (shortest first, so arcs nest) until it crosses no label placed so
    far and its label touches no arc or label: a label moves along its arc where an arc
    that crosses its own (interleaved spans) rises through it. Where no height clears an
    arc (its foot under a label with nowhere to go) it stays at its lowest."""
    placed: list[_Arc] = []
    for arc in arcs:
        inside = [
            p.rise for p in placed if min(arc.x1, arc.x2) <= min(p.x1, p.x2) and max(p.x1, p.x2) <= max(arc.x1, arc.x2)
        ]
        lowest = max([_RISE_MIN] + [r + _RISE_STEP for r in inside])  # outside the arcs it spans
        arc.rise = lowest
        while not _settles(arc, placed):
            arc.rise += _RISE_STEP
            if arc.rise > lowest + _RISE_GIVE_UP:
                arc.rise = lowest
                break
        placed.append(arc)


def _anchors(
    names: list[str], x_of: dict[str, float], w_of: dict[str, float], ends: list[tuple[str, str]]
) -> list[tuple[float, float]]:
    """Where each arc (src, dst) meets its boxes along one side: at each box, arcs to the
    left on the left part, arcs to the right on the right, the longer ones nearer the
    middle of their part's run outward, so arcs nest instead of crossing."""
    at: dict[str, list[tuple[tuple, int, int]]] = defaultdict(list)  # box → (sort key, arc, end)
    pos = {n: i for i, n in enumerate(names)}
    for k, (src, dst) in enumerate(ends):
        for end, (me, other) in enumerate(((src, dst), (dst, src))):
            span = pos[other] - pos[me]
            # leftward arcs: short ones leftmost; rightward: long ones leftmost (of two as
            # long, the first drawn is outside at both ends)
            at[me].append(((0, abs(span), -k) if span < 0 else (1, -abs(span), k), k, end))
    out = [[0.0, 0.0] for _ in ends]
    for box, items in at.items():
        items.sort()
        for i, (_, k, end) in enumerate(items):
            share = (i + 1) / (len(items) + 1)
            out[k][end] = x_of[box] + w_of[box] * (0.2 + 0.6 * share)
    return [tuple(pair) for pair in out]


def render_svg(fdg: Graph) -> str:
    """The FDG as a standalone SVG document (no scripts, no external resources)."""
    names = _order(fdg)
    if not names:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="320" height="40">'
            '<text x="10" y="25" font-family="sans-serif" font-size="13">empty FDG: '
            "register cells with %%fragment NAME</text></svg>"
        )
    w_of = {n: _box_width(fdg, n) for n in names}
    x_of, x = {}, 20.0
    for n in names:
        x_of[n], x = x, x + w_of[n] + _GAP
    edges: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for e in fdg.interfaces:
        label_list = edges[(e.producer, e.consumer, e.timing)]
        if e.name not in label_list:
            label_list.append(e.name)
    sides = []  # per side: (up, arcs)
    for up in (True, False):
        keys = [k for k in edges if (names.index(k[0]) < names.index(k[1])) == up]
        anchors = _anchors(names, x_of, w_of, [(k[0], k[1]) for k in keys])
        arcs = [_Arc(a[0], a[1], up, k[2], edges[k]) for k, a in zip(keys, anchors)]
        # shorter arcs nearer the boxes, so arcs nest instead of crossing
        _lay_out(sorted(arcs, key=lambda a: abs(a.x2 - a.x1)))
        sides.append(arcs)
    above, below = sides
    top = 16 + max([a.reach for a in above], default=0)
    width = round(x - _GAP + 20)
    height = round(top + _BOX_H + max([a.reach for a in below], default=0) + 48)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        "<defs>"
        + "".join(
            f'<marker id="wb-arrow-{t}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
            for t, c in _COLOURS.items()
        )
        + "</defs>",
    ]
    for arc in above:
        out.append(_arrow(arc, top, -1))
    for arc in below:
        out.append(_arrow(arc, top + _BOX_H, 1))
    for name in names:
        out.append(_box(fdg, name, x_of[name], top, w_of[name]))
    legend_y = height - 14
    x = 20
    for timing, colour in (
        ("per-step", _COLOURS["per-step"]),
        ("stacked", _COLOURS["stacked"]),
        ("latest", _COLOURS["latest"]),
        ("once", _COLOURS["once"]),
    ):
        out.append(
            f'<rect x="{x}" y="{legend_y - 9}" width="12" height="4" fill="{colour}"/>'
            f'<text x="{x + 16}" y="{legend_y - 4}" font-size="11" fill="#555">'
            f"{html.escape(TIMINGS[timing])}</text>"
        )
        x += 40 + 6 * len(TIMINGS[timing])
    out.append("</svg>")
    return "".join(out)


def _arrow(arc: _Arc, edge: float, sign: int) -> str:
    """``arc`` drawn from the boxes' ``edge`` (y), away from them in the direction ``sign``."""
    colour = _COLOURS[arc.timing]
    ctrl = edge + sign * arc.rise / 0.75
    path = f"M{arc.x1:.0f},{edge:.0f} C{arc.x1:.0f},{ctrl:.1f} {arc.x2:.0f},{ctrl:.1f} {arc.x2:.0f},{edge:.0f}"
    left, near, _, far = arc.label_box()
    mid = left + arc.width / 2
    # the label's lines top to bottom, from its top edge (beyond the apex, on the arc's side)
    label_top = edge - far if sign < 0 else edge + near
    spans = "".join(
        f'<tspan x="{mid:.0f}" y="{label_top + _LINE_PX * i + _LABEL_PX - 1:.0f}">{html.escape(line)}</tspan>'
        for i, line in enumerate(arc.lines)
    )
    return (
        f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2" '
        f'marker-end="url(#wb-arrow-{arc.timing})"><title>{html.escape(TIMINGS[arc.timing])}</title></path>'
        f'<text class="wb-edge-label" font-size="{_LABEL_PX}" text-anchor="middle" fill="{colour}" '
        f'stroke="white" stroke-width="3" paint-order="stroke">{spans}</text>'
    )


def _box(fdg: Graph, name: str, x: float, y: float, width: float) -> str:
    rates, sub = _box_lines(fdg, name)
    centre = x + width / 2
    return (
        f'<g class="wb-fragment"><rect x="{x:.0f}" y="{y:.0f}" width="{width:.0f}" height="{_BOX_H}" rx="10" '
        f'fill="#f7f7f7" stroke="#333" stroke-width="1.5"/>'
        f'<text x="{centre:.0f}" y="{y + 28:.0f}" font-size="17" font-weight="bold" '
        f'text-anchor="middle">{html.escape(name)}</text>'
        f'<text x="{centre:.0f}" y="{y + 48:.0f}" font-size="11" text-anchor="middle" '
        f'fill="#555">{html.escape(rates)}</text>'
        f'<text x="{centre:.0f}" y="{y + 64:.0f}" font-size="11" text-anchor="middle" '
        f'fill="#555">{html.escape(sub)}</text></g>'
    )


def render_html(fdg: Graph) -> str:
    """The drawing plus a table of interfaces, for a notebook's rich display."""
    rows = "".join(
        f"<tr><td>{html.escape(e.producer)} → {html.escape(e.consumer)}</td>"
        f"<td><code>{html.escape(e.name)}</code></td><td>{html.escape(TIMINGS[e.timing])}</td></tr>"
        for e in fdg.interfaces
    )
    table = (
        f"<details><summary>{len(fdg.interfaces)} interfaces</summary>"
        f"<table><tr><th>edge</th><th>name</th><th>when</th></tr>{rows}</table></details>"
    )
    return f'<div class="workbench-fdg">{render_svg(fdg)}{table}</div>'
