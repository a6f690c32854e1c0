"""workbench.fdg.fields: which parts of a notebook value only init cells read, from the
cells' syntax trees, claiming nothing the source cannot prove. Pure: no run, no cluster."""

from __future__ import annotations

import pytest

from workbench.fdg.fields import field_reads, init_only
from workbench.fdg.graph import Graph


@pytest.mark.parametrize(
    "code, now",
    [
        ("x = cfg.hidden", ("hidden",)),
        ("x = cfg['hidden']", ("hidden",)),
        ("x = cfg.model.depth", ("model",)),  # the first attribute is the field
        ("x = cfg['model']['depth']", ("model",)),
        ("cfg.lr = 0.1", ("lr",)),  # a write mentions the field too
        ("x = f'{cfg.name}'", ("name",)),
        ("x = [cfg.n for _ in range(2)]", ("n",)),  # a list comprehension runs at once
        ("class Net:\n    size = cfg.hidden", ("hidden",)),  # so does a class body
    ],
)
def test_fields_read_as_the_cell_runs(code, now):
    reads = field_reads(code, "cfg")
    assert reads.now == now and not reads.later and not reads.whole_now and not reads.whole_later


@pytest.mark.parametrize(
    "code",
    [
        "f = lambda: cfg.hidden",
        "def f():\n    return cfg.hidden",
        "async def f():\n    return cfg.hidden",
        "g = (cfg.hidden for _ in range(2))",
        "class Net:\n    def size(self):\n        return cfg.hidden",
    ],
)
def test_fields_read_by_code_that_runs_later(code):
    reads = field_reads(code, "cfg")
    assert reads.later == ("hidden",) and not reads.now


@pytest.mark.parametrize(
    "code",
    [
        "build(cfg)",
        "c = cfg",
        "x = getattr(cfg, 'hidden')",
        "x = cfg[key]",
        "for k in cfg:\n    pass",
        "x = vars(cfg)",
        "del cfg",
    ],
)
def test_uses_of_the_whole_value(code):
    assert field_reads(code, "cfg").whole_now


def test_other_names_are_not_uses():
    assert not field_reads("x = config.hidden + cfg2.lr + obj.cfg", "cfg").mentions


def _graph(init: str, **cells) -> Graph:
    g = Graph()
    g.add_fragment("learner", init, rate="init")
    for rate, code in cells.items():
        g.add_fragment("learner", code, rate=rate)
    return g


def test_a_field_only_init_cells_read_is_init_only_with_its_fragments():
    g = _graph("net = make(cfg.hidden)", iteration="net = learn(net, cfg.lr)")
    g.add_fragment("env", "envs = make_envs(cfg.hidden, cfg.num_envs)", rate="init")
    g.add_fragment("env", "obs = envs.step()", rate="step")
    only = init_only(g, "cfg")
    assert only.fields == {"hidden": ("learner", "env"), "num_envs": ("env",)} and only.whole == ()


@pytest.mark.parametrize(
    "other",
    [
        {"iteration": "net = learn(net, cfg.hidden)"},  # the field, every iteration
        {"step": "obs = obs * cfg.hidden"},  # the field, every step
        {"iteration": "net = learn(net, cfg)"},  # the value whole: any field
        {"iteration": "c = cfg\nnet = learn(net, c.lr)"},  # an alias
    ],
)
def test_a_field_other_cells_may_read_is_not_init_only(other):
    assert "hidden" not in init_only(_graph("net = make(cfg.hidden)", **other), "cfg").fields


def test_code_an_init_cell_defines_for_later_is_not_init_time():
    g = _graph(
        "net = make(cfg.hidden)\nact = lambda o: o * cfg.temperature\nhook = lambda: log(cfg)",
        iteration="net = learn(net)",
    )
    assert init_only(g, "cfg").fields == {}  # the lambda uses cfg whole, at some later time


def test_a_value_nothing_but_init_cells_reads_is_init_only_whole():
    g = _graph("net = make(hidden)\nopt = adam(net, cfg)", iteration="net = learn(net, opt)")
    assert init_only(g, "hidden").whole == ("learner",)
    assert init_only(g, "cfg").whole == ("learner",)  # used whole, but only at init
    g.add_fragment("learner", "net = learn(net, opt, cfg.lr)", rate="iteration")
    assert init_only(g, "cfg").whole == ()
