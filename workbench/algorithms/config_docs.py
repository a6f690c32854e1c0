"""Per-field documentation of config dataclasses, visible to ``help()`` and ``Config?``.

An algorithm's config documents each field CleanRL-style, with a string right below it.
Python keeps those strings only in the source; :func:`documented` reads them once, when
the class is defined, and lists every field with its default and its text in the class
docstring (and in each field's ``metadata["doc"]``), so a notebook's ``PPOConfig?`` shows them.

Example (``PPOConfig`` is ``@documented``):
    >>> from dataclasses import fields
    >>> from workbench.algorithms.ppo import PPOConfig
    >>> print(PPOConfig.__doc__.split("Fields:")[1].splitlines()[2])
        seed (int, default 1): seeds torch and the envs (replica ``i`` uses ``seed + i``)
    >>> fields(PPOConfig)[1].metadata["doc"]
    'seeds torch and the envs (replica ``i`` uses ``seed + i``)'
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types

__all__ = ["documented", "field_docs"]


def field_docs(cls) -> dict[str, str]:
    """``field name → the string written right below it`` in ``cls``'s source ({} when
    the source cannot be read, e.g. a class defined in an interactive prompt)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def documented(cls):
    """Class decorator (above ``@dataclass``): field docs into the docstring and metadata."""
    docs = field_docs(cls)
    lines = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):  # bookkeeping, not a setting (e.g. which fields follow a rule)
            continue
        doc = docs.get(f.name, "")
        if doc:
            f.metadata = types.MappingProxyType({**f.metadata, "doc": doc})
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        default = f.default if f.default is not dataclasses.MISSING else "…"
        lines.append(f"    {f.name} ({kind}, default {default!r}): {doc}".rstrip(": ").rstrip())
    head = inspect.cleandoc(cls.__doc__ or "")
    cls.__doc__ = f"{head}\n\nFields:\n" + "\n".join(lines)
    return cls
