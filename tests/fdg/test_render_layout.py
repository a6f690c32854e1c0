"""The FDG drawing's layout, from its own geometry (the browser test measures the page):
no arc through a label, labels apart, every box as wide as its texts."""

from __future__ import annotations

import pytest

from workbench.fdg import render
from workbench.fdg.graph import Graph


def _ppo():
    from workbench.algorithms import ppo

    return ppo.build_fdg()


def _dense():
    """Four fragments, each writing a value every other one reads: arcs that cross."""
    fdg = Graph()
    names = ["a", "b", "c", "d"]
    for i, name in enumerate(names):
        reads = [f"{other}_to_{name}_value" for other in names if other != name]
        writes = [f"{name}_to_{other}_value" for other in names if other != name]
        code = "\n".join(f"{w} = 1" for w in writes) + "\n" + " + ".join(reads)
        fdg.add_fragment(name, code, rate="step" if i < 3 else "iteration")
    return fdg


def _through(box, points) -> bool:
    """Whether the curve passes through the label's box (its edges excluded)."""
    left, near, right, far = box
    return any(left < x < right and near < y < far for x, y in points)


@pytest.mark.parametrize("build", [_ppo, _dense])
def test_no_arc_crosses_a_label_and_no_labels_overlap(build, monkeypatch):
    laid_out = []
    lay_out = render._lay_out
    monkeypatch.setattr(render, "_lay_out", lambda arcs: (lay_out(arcs), laid_out.append(arcs)))
    render.render_svg(build())
    for arcs in laid_out:  # above the boxes, then below
        for arc in arcs:
            for other in arcs:
                if other is not arc:
                    assert not _through(arc.label_box(), other.points(2000)), (arc.lines, other.lines)
                    assert not render._overlap(arc.label_box(), other.label_box()), (arc.lines, other.lines)
            assert not _through(arc.label_box(), arc.points(2000))  # beyond its own apex


def test_a_box_is_as_wide_as_its_texts():
    fdg = _ppo()  # the actor runs at init, every step and every iteration
    rates, _ = render._box_lines(fdg, "actor")
    assert rates == "init · every step · every iteration"
    assert render._box_width(fdg, "actor") >= render.text_width(rates, 11) + 2 * render._PAD
    assert render._box_width(fdg, "env") == render._BOX_MIN_W
