"""The %%fragment / %fdg run option parsers and the SVG drawing of an FDG."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from workbench.errors import FragmentOptionError, RunConfigError
from workbench.fdg.graph import Graph
from workbench.config import RUN_USAGE, parse_run_line
from workbench.fdg.options import FRAGMENT_USAGE, parse_fragment_line
from workbench.fdg.render import render_html, render_svg

SVG_NS = "http://www.w3.org/2000/svg"


# ----------------------------------------------------------------------------- %%fragment
@pytest.mark.parametrize(
    "line, expected",
    [
        ("actor", {"name": "actor", "rate": None, "replicas": None, "device": None, "reads": [], "writes": []}),
        (" env --init", {"name": "env", "rate": "init"}),
        ("actor --every iteration", {"name": "actor", "rate": "iteration"}),
        ("actor --every step --replicas 2 --device gpu", {"rate": "step", "replicas": 2, "device": "gpu"}),
        ("env --reads a b --writes c", {"reads": ["a", "b"], "writes": ["c"]}),
        ("env --writes c --init", {"writes": ["c"], "rate": "init"}),
        ("--init env", {"name": "env", "rate": "init"}),
    ],
)
def test_parse_fragment_line(line, expected):
    parsed = parse_fragment_line(line)
    assert set(parsed) == {"name", "rate", "replicas", "device", "reads", "writes"}
    assert {k: parsed[k] for k in expected} == expected


def test_parse_fragment_line_docstring_example():
    assert parse_fragment_line("actor --replicas 2") == {
        "name": "actor",
        "rate": None,
        "replicas": 2,
        "device": None,
        "reads": [],
        "writes": [],
    }


def test_parsed_fragment_line_feeds_add_fragment():
    fdg = Graph()
    fdg.add_fragment(code="obs = reset()", **parse_fragment_line("env --init --replicas 3"))
    assert fdg["env"].rates == ("init",) and fdg["env"].replicas == 3


@pytest.mark.parametrize(
    "line, message",
    [
        ("env --fast", r"%%fragment: unrecognized arguments: --fast\. Usage: %%fragment \[--init \| --every"),
        ("env --init --every step", r"argument --every: not allowed with argument --init\. Usage:"),
        ("env --every epoch", r"argument --every: invalid choice: 'epoch'"),
        ("env --device tpu", r"argument --device: invalid choice: 'tpu'"),
        ("env --replicas two", r"argument --replicas: invalid int value: 'two'"),
        ("env --rep 2", r"unrecognized arguments: --rep 2"),  # no abbreviations
        ("env actor", r"unrecognized arguments: actor"),
        ("", r"the following arguments are required: name"),
        ("--init", r"the following arguments are required: name"),
    ],
)
def test_parse_fragment_line_errors_carry_usage(line, message):
    with pytest.raises(FragmentOptionError, match=message) as info:
        parse_fragment_line(line)
    assert "Usage: %%fragment" in str(info.value)
    assert "--writes" in str(info.value)  # the whole usage, not only its first line


@pytest.mark.parametrize("replicas", ["0", "-1"])
def test_parse_fragment_line_replicas_below_one(replicas):
    with pytest.raises(FragmentOptionError, match=rf"fragment 'env': --replicas must be ≥ 1, got {replicas}\.") as info:
        parse_fragment_line(f"env --replicas {replicas}")
    assert info.value.fragment == "env"


def test_parse_fragment_line_unbalanced_quote():
    with pytest.raises(FragmentOptionError, match=r"cannot read the options \"env 'x\": No closing quotation\."):
        parse_fragment_line("env 'x")


def test_parse_fragment_line_does_not_exit_the_process():
    with pytest.raises(FragmentOptionError):
        parse_fragment_line("--help")


def test_fragment_usage_text():
    for option in ("--init", "--every", "--replicas", "--device", "--reads", "--writes"):
        assert option in FRAGMENT_USAGE
    for option in ("--iterations", "--steps", "--policy", "--cluster", "--target-return"):
        assert option in RUN_USAGE


# ----------------------------------------------------------------------------- %fdg run
def test_parse_run_line_full():
    assert parse_run_line(
        "run --iterations 60 --steps 32 --policy coarse --cluster tcp://x:8786 --target-return 475"
    ) == {"iterations": 60, "steps": 32, "policy": "coarse", "cluster": "tcp://x:8786", "target_return": 475.0}


@pytest.mark.parametrize(
    "line, expected",
    [
        ("run --iterations 60 --steps 32", {"iterations": 60, "steps": 32}),
        ("--iterations 3", {"iterations": 3}),
        ("run", {}),
        ("", {}),
        ("run --policy 'my policy.json'", {"policy": "my policy.json"}),
        ("run --target-return 1e3", {"target_return": 1000.0}),
    ],
)
def test_parse_run_line(line, expected):
    assert parse_run_line(line) == expected


@pytest.mark.parametrize(
    "line, message",
    [
        ("run --fast", r"%fdg run: unrecognized arguments: --fast\. Usage: %fdg run \[--iterations N\]"),
        ("run --iterations ten", r"argument --iterations: invalid int value: 'ten'"),
        ("run --target-return high", r"argument --target-return: invalid float value: 'high'"),
        ("run extra", r"unrecognized arguments: extra"),
        ("run --iter 3", r"unrecognized arguments: --iter 3"),
        ("run --policy 'x", r"cannot read the options \"run --policy 'x\": No closing quotation\."),
    ],
)
def test_parse_run_line_errors(line, message):
    with pytest.raises(RunConfigError, match=message):
        parse_run_line(line)


# ----------------------------------------------------------------------------- SVG
def svg_root(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{{{SVG_NS}}}svg"
    return root


def all_text(root: ET.Element) -> str:
    return " ".join("".join(el.itertext()) for el in root.iter(f"{{{SVG_NS}}}text"))


def no_external_urls(text: str) -> None:
    urls = re.findall(r"https?://[^\s\"'<>]*", text)
    assert set(urls) <= {SVG_NS}, urls
    assert "<script" not in text and "href" not in text


def test_render_svg_ppo(ppo_fdg):
    text = render_svg(ppo_fdg)
    assert text.startswith("<svg")
    root = svg_root(text)
    words = all_text(root)
    for name in ppo_fdg.fragments:
        assert name in words
    for e in ppo_fdg.interfaces:
        assert re.search(rf"\b{e.name}\b", words), e.name
    no_external_urls(text)
    assert int(root.get("width")) > 3 * 170
    # one arrow per (producer, consumer, timing), each with a hover title
    arrows = {(e.producer, e.consumer, e.timing) for e in ppo_fdg.interfaces}
    paths = [p for p in root.iter(f"{{{SVG_NS}}}path") if p.get("marker-end")]
    assert len(paths) == len(arrows)


def test_render_svg_shows_rates_and_options():
    fdg = Graph()
    fdg.add_fragment("env", "obs = reset()", rate="init", replicas=4, device="gpu")
    fdg.add_fragment("env", "obs = step(action)", rate="step")
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    words = all_text(svg_root(render_svg(fdg)))
    assert "init · every step" in words
    assert "×4 gpu" in words


def test_render_svg_empty_fdg():
    text = render_svg(Graph())
    root = svg_root(text)
    assert "empty FDG" in all_text(root)
    no_external_urls(text)


def test_render_svg_draws_a_graph_that_does_not_schedule():
    fdg = Graph()
    fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    fdg.add_fragment("env", "obs = advance(action)", rate="step")
    fdg.add_fragment("learner", "w = learn(obs)")
    words = all_text(svg_root(render_svg(fdg)))
    for name in ("actor", "env", "learner", "action", "obs"):
        assert name in words


def test_render_svg_single_fragment():
    fdg = Graph()
    fdg.add_fragment("learner", "w = 1")
    assert "learner" in all_text(svg_root(render_svg(fdg)))


def test_render_html(ppo_fdg):
    text = render_html(ppo_fdg)
    assert text.startswith('<div class="workbench-fdg"><svg')
    assert f"<summary>{len(ppo_fdg.interfaces)} interfaces</summary>" in text
    ET.fromstring(text)  # well-formed as XML too
    no_external_urls(text)
