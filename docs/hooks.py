"""mkdocs hook: the repository's own files in the docs site, without copies in ``docs/``.

The pages link to files that live beside ``docs/`` (``../notebooks/quickstart.ipynb``,
``../tests/test_bad_input.py``), so the links work when the Markdown is read on a code
host. For the site this hook

- mounts every ``notebooks/*.ipynb`` at its repository path (mkdocs-jupyter renders them,
  without running them: ``execute: false`` in ``mkdocs.yml``);
- mounts every other repository file a page links to, as a static file at its repository path;
- rewrites those links (``../tests/x.py`` → ``tests/x.py``) so that ``--strict`` checks them
  like any other link: a link to a file that does not exist stays as written and fails the build;
- writes the table of run options where a page says ``{{ run_options_table }}``, from
  ``RunConfig``'s fields, so the reference cannot drift from the code.

Example: a page ``docs/errors.md`` with ``[test](../tests/test_bad_input.py#L3)`` builds to a
link to ``tests/test_bad_input.py#L3`` in the site, which holds that file.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, InclusionLevel

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = "notebooks"

# [text](target) and ![alt](target); a target with a scheme (https:, mailto:) is not ours
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def _outside_target(page_src: str, target: str, docs_dir: Path) -> str | None:
    """The repository path ``target`` names when it leaves the docs folder for an existing file."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("/"):
        return None
    resolved = (docs_dir / page_src).parent.joinpath(target).resolve()
    if resolved.is_relative_to(docs_dir) or not resolved.is_relative_to(REPO) or not resolved.is_file():
        return None
    return resolved.relative_to(REPO).as_posix()


def _linked_outside_files(docs_dir: Path) -> set[str]:
    linked = set()
    for page in docs_dir.rglob("*.md"):
        for match in _LINK.finditer(page.read_text(encoding="utf-8")):
            repo_path = _outside_target(page.relative_to(docs_dir).as_posix(), match.group(2), docs_dir)
            if repo_path:
                linked.add(repo_path)
    return linked


# before mkdocs-jupyter's on_files (priority 0), which turns the notebooks into pages
@event_priority(50)
def on_files(files, config):
    docs_dir = Path(config["docs_dir"]).resolve()
    notebooks = {p.relative_to(REPO).as_posix() for p in (REPO / NOTEBOOKS).glob("*.ipynb")}
    for repo_path in sorted(notebooks | _linked_outside_files(docs_dir)):
        if files.get_file_from_path(repo_path) is None:
            # not in the nav: notebooks are listed there by hand, linked files are reached by links
            files.append(
                File(
                    repo_path,
                    str(REPO),
                    config["site_dir"],
                    config["use_directory_urls"],
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
    return files


def run_options_table() -> str:
    """Every RunConfig field: its keyword, its flag (``%fdg run`` and ``workbench run``), its
    default and its help, as a Markdown table."""
    import dataclasses

    from workbench.config import RunConfig

    rows = [
        "| `fdg.run(...)` keyword | `%fdg run` / `workbench run` flag | default | what it does |",
        "| --- | --- | --- | --- |",
    ]
    for field in dataclasses.fields(RunConfig):
        meta = field.metadata
        flag = "--" + field.name.replace("_", "-")
        if "cli" not in meta["surfaces"] and "magic" not in meta["surfaces"]:
            flags = "— (Python only)"
        elif meta["boolean"]:
            flags = f"`{flag}` / `--no-{flag[2:]}`"
        else:
            flags = f"`{flag} {meta['metavar']}`" if meta["metavar"] else f"`{flag}`"
        flags += "".join(f", `{alias}`" for alias in meta["aliases"])
        if len(set(meta["surfaces"]) & {"cli", "magic"}) == 1:
            flags += " (`workbench run` only)" if "cli" in meta["surfaces"] else " (`%fdg run` only)"
        default = "—" if field.default in (None, ()) else f"`{field.default!r}`"
        help_text = meta["help"].replace("|", "\\|")  # a | inside a cell would end it
        rows.append(f"| `{field.name}` | {flags} | {default} | {help_text} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if "{{ run_options_table }}" in markdown:
        markdown = markdown.replace("{{ run_options_table }}", run_options_table())
    docs_dir = Path(config["docs_dir"]).resolve()
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match):
        repo_path = _outside_target(page.file.src_uri, match.group(2), docs_dir)
        if repo_path is None:
            return match.group(0)
        relative = posixpath.relpath(repo_path, page_dir or ".")
        return f"{match.group(1)}{relative}{match.group(3) or ''}{match.group(4)}"

    return _LINK.sub(rewrite, markdown)
