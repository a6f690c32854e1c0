"""The docs site builds, warnings as errors, and the README stays a page that works.

CI runs exactly the README's test command (``.ci/run``), so the docs build runs here: one
``mkdocs build --strict`` of the real site (mkdocs.yml: every page, the API reference from
the docstrings, the notebooks rendered as stored), then checks of what it built. Strict
mode fails on a broken link or anchor; a small second build shows that it does.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import nbformat
import pytest
import yaml

import workbench
from workbench.config import RunConfig
from workbench.errors import PlacementError
from workbench.fdg.policy import SingleLearnerCoarse
from workbench.session import FDG

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"


def _mkdocs_build(config: Path, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    # the Material theme's banner about MkDocs 2.0 is advice, not a warning about the site
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = _mkdocs_build(REPO / "mkdocs.yml", site, REPO)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return site


def _nav_paths(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [path for value in nav.values() for path in _nav_paths(value)]
    return [path for item in nav for path in _nav_paths(item)]


def _page(site: Path, src: str) -> str:
    return (site / src.removesuffix(".md").removesuffix(".ipynb").removesuffix("index") / "index.html").read_text()


def _text(html: str) -> str:
    """A page's text as a reader sees it: tags (the code highlighter's spans too) stripped."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def _first_sentence(doc: str) -> str:
    return " ".join(doc.split(".")[0].split())


def test_every_page_and_notebook_is_in_the_nav():
    nav = _nav_paths(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    notebooks = {f"notebooks/{path.name}" for path in (REPO / "notebooks").glob("*.ipynb")}
    missing = sorted((pages | notebooks) - set(nav))
    assert not missing, f"add these to the nav in mkdocs.yml: {missing}"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_api_reference_is_built_from_the_docstrings(site):
    for page, obj in [
        ("api/workbench.md", FDG),
        ("api/workbench.md", RunConfig),
        ("api/policies.md", SingleLearnerCoarse),
        ("api/errors.md", PlacementError),
    ]:
        assert _first_sentence(obj.__doc__) in _text(_page(site, page)), f"{obj.__name__}'s docstring not on {page}"
    # the docs' Griffe extension put every doctest in a code block: none became a block quote
    # (Markdown's reading of `>>>`) or a fence shown as text
    for page in (site / "api").rglob("index.html"):
        html = page.read_text()
        assert "<blockquote" not in html and "```" not in html, page
    assert ">>> fdg = wb.FDG()" in _text(_page(site, "api/workbench.md"))


def test_run_options_table_has_every_option(site):
    # the docs hook writes it from RunConfig's fields: an option added to the code is in the docs
    text = _text(_page(site, "api/workbench.md"))
    for field in dataclasses.fields(RunConfig):
        flag = "--" + field.name.replace("_", "-")
        shown = flag if {"cli", "magic"} & set(field.metadata["surfaces"]) else "— (Python only)"
        assert f"{field.name} {shown}" in text, field.name


def test_notebooks_are_rendered_as_stored_not_run(site):
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        html = _page(site, f"notebooks/{notebook.name}")
        cells = [cell for cell in nbformat.read(notebook, as_version=4).cells if cell.cell_type == "code"]
        assert " ".join(cells[-1].source.split()) in _text(html), f"{notebook.name}'s last cell is not on its page"
        # as stored: a run would have given outputs to the cells stored without any
        with_outputs = sum(1 for cell in cells if cell.outputs)
        assert html.count('class="jp-OutputArea jp-Cell-outputArea"') == with_outputs, (
            f"{notebook.name} was run while building the docs"
        )


def test_links_to_repository_files_resolve_in_the_site(site):
    # docs/errors.md links its tests as ../tests/…: the hook mounts them and rewrites the links
    errors = _page(site, "errors.md")
    assert 'href="../tests/test_bad_input.py' in errors
    assert (site / "tests" / "test_bad_input.py").read_text() == (REPO / "tests" / "test_bad_input.py").read_text()


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[there](other.md#no-such-heading)\n")
    (docs / "other.md").write_text("# Other\n\n[a file](../tests/no_such_test.py)\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(DOCS / "hooks.py")], plugins=["search"], nav=["index.md", "other.md"])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    built = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path)
    assert built.returncode != 0
    assert "no-such-heading" in built.stderr and "no_such_test.py" in built.stderr, built.stderr


def _readme_blocks() -> list[str]:
    return re.findall(r"```\w*\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_is_a_page_whose_test_command_is_what_ci_runs():
    assert len(README.read_text().splitlines()) <= 200
    ci_command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    commands = [line for line in _readme_blocks()[0].splitlines() if line and not line.startswith("#")]
    assert commands[1] == ci_command, "README's second command must be exactly what .ci/run runs"
    # every docs page the README points to exists (GitHub shows the README, not the site)
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (REPO / target).is_file(), target


def test_readme_example_prints_what_the_readme_says(tmp_path):
    example = next(block for block in _readme_blocks() if "wb.FDG(" in block)
    assert len(example.strip().splitlines()) <= 15
    claimed = re.search(r"It ends with `([^`…]+)", README.read_text()).group(1)
    script = tmp_path / "example.py"
    script.write_text(example)
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(workbench.__file__).parent.parent)},
    )
    assert ran.returncode == 0, ran.stderr
    assert " ".join(claimed.split()) in ran.stdout, ran.stdout
