"""Griffe extension for the API reference: workbench's docstrings read well as Markdown.

The docstrings are written for ``help()`` and ``--doctest-modules``: doctest examples
under an ``Example:`` line (or none), and Sphinx roles such as ``:class:`~workbench.FDG```.
Rendered as Markdown, ``>>>`` starts a block quote and a role shows its colons, so before
mkdocstrings renders a docstring this extension

- puts each run of doctest lines (``>>>``, ``...``, the output up to a blank line) in a
  fenced ``pycon`` block, indented as it was;
- turns a role into inline code: ``:class:`~a.b.C``` → ```C```, ``:meth:`title <a.b>``` →
  ```title```.

Example (the doctest lines below become one fenced block):

    >>> fence_doctests(">>> 1 + 1\\n2").splitlines()[0]
    '```pycon'
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj|py:\w+):`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_TILDE_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj|py:\w+):`~([^`]+)`")


def _role_as_code(match: re.Match) -> str:
    return f"`{match.group(1).strip()}`"


def roles_as_code(text: str) -> str:
    # `~a.b.C` shows only `C`, as Sphinx does
    text = _TILDE_ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return _ROLE.sub(_role_as_code, text)


_SECTION = re.compile(r"^\s*\w[\w ]*:\s*$")  # "Example:", "Returns:": its body stays indented


def fence_doctests(text: str) -> str:
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        previous = next((earlier for earlier in reversed(out) if earlier.strip()), "")
        # outside a section, an indented fence would be an indented code block showing the
        # backticks: the fence takes the indentation of the paragraph before it
        fence = indent if _SECTION.match(previous) else previous[: len(previous) - len(previous.lstrip())]
        if len(fence) > len(indent):
            fence = indent
        # a fence directly after a line of text would be read as part of that paragraph;
        # a section's body must follow its title directly
        if out and out[-1].strip() and not _SECTION.match(out[-1]):
            out.append("")
        out.append(f"{fence}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(fence + lines[i][len(indent) :])
            i += 1
        out.append(f"{fence}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrites every docstring as it is loaded (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(roles_as_code(obj.docstring.value))
