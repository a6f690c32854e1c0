"""Which parts of a notebook value only init cells read: ``cfg.hidden``, ``cfg["model"]``.

``%fdg update cfg`` sends a changed value to running replicas, and their step and
iteration cells read it from the next boundary on. An init cell does not run again in the
run, so a field that *only* init cells read (the hidden size a network is built with, the
name of the model to load) changes nothing until the next run. This module finds such
fields from the cells' syntax trees, so the update can say so
(:func:`workbench.live_edits.init_only_changes`).

The analysis claims as little as it can prove. A part of the value counts as read only by
init cells when

- an init cell reads it as the cell runs (top level, class bodies, list/set/dict
  comprehensions) — code an init cell defines to run later (a function, a lambda, a
  generator expression) may run every step, so it counts as a step cell's read;
- no other cell mentions it (``cfg.lr = 0.1`` in a step cell counts: it is used there);
- no other cell uses the value whole (passes it to a function, aliases it, iterates it):
  then which fields that code reads cannot be told, and nothing is claimed for that name.

Fields are the first attribute or constant string key (``cfg.model.depth`` is field
``model``; ``cfg[key]`` and ``getattr(cfg, "lr")`` use ``cfg`` whole). Pure Python: the
caller (which holds the values) checks what the source cannot show, such as a notebook
function a step cell calls that reads ``cfg`` itself.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("learner", "net = make(cfg.hidden, cfg['depth'])\\nlr = cfg.lr", rate="init")
    >>> _ = fdg.add_fragment("learner", "step(net, lr * cfg.decay)", rate="iteration")
    >>> only = init_only(fdg, "cfg")
    >>> only.fields, only.whole
    ({'hidden': ('learner',), 'depth': ('learner',), 'lr': ('learner',)}, ())
    >>> _ = fdg.add_fragment("learner", "step(net, cfg)", rate="iteration")  # cfg whole, every iteration
    >>> init_only(fdg, "cfg").fields
    {}
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = ["FieldReads", "InitOnly", "field_reads", "init_only"]


@dataclass(frozen=True)
class FieldReads:
    """How one cell uses the value ``name``: fields read as the cell runs (``now``) and in
    code that runs later (``later``), and whether it uses the value whole, now or later."""

    now: tuple[str, ...] = ()
    later: tuple[str, ...] = ()
    whole_now: bool = False
    whole_later: bool = False

    @property
    def mentions(self) -> bool:
        return bool(self.now or self.later or self.whole_now or self.whole_later)


@dataclass(frozen=True)
class InitOnly:
    """What of a notebook value only init cells read, each with the fragments whose init
    cells read it. ``whole``: no other code reads the value at all (every part of it is
    init-only), the fragments whose init cells read it; ``fields``: field → fragments, for
    each field init cells read that no other cell mentions."""

    whole: tuple[str, ...] = ()
    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)


class _Uses(ast.NodeVisitor):
    """Collects the uses of one name, by whether the code runs now or later."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.deferred = 0  # depth of function, lambda and generator bodies around the node
        self.now: dict[str, None] = {}
        self.later: dict[str, None] = {}
        self.whole_now = self.whole_later = False

    def _field(self, node: ast.AST) -> str | None:
        value = getattr(node, "value", None)
        if not (isinstance(value, ast.Name) and value.id == self.name):
            return None
        if isinstance(node, ast.Attribute):
            return node.attr
        key = node.slice if isinstance(node, ast.Subscript) else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        return None  # cfg[key]: which field it reads cannot be told

    def _use_field(self, node) -> None:
        name = self._field(node)
        if name is None:
            self.generic_visit(node)
        else:  # the name itself is not a whole use here, so its Name node is not visited
            (self.later if self.deferred else self.now).setdefault(name, None)

    visit_Attribute = visit_Subscript = _use_field

    def visit_Name(self, node: ast.Name) -> None:
        if node.id != self.name:
            return
        if self.deferred:
            self.whole_later = True
        else:
            self.whole_now = True

    def _runs_later(self, node) -> None:
        # decorators and defaults run now; counting them as later only claims less
        self.deferred += 1
        self.generic_visit(node)
        self.deferred -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_GeneratorExp = _runs_later


@lru_cache(maxsize=4096)  # every update asks of every cell again; cells rarely change
def field_reads(code: str, name: str) -> FieldReads:
    """How the cell ``code`` uses the value ``name`` (see the module's doc).

    >>> field_reads("n = cfg.hidden\\nact = lambda o: o * cfg.temp\\nuse(cfg)", "cfg")
    FieldReads(now=('hidden',), later=('temp',), whole_now=True, whole_later=False)
    """
    uses = _Uses(name)
    uses.visit(ast.parse(code))
    return FieldReads(tuple(uses.now), tuple(uses.later), uses.whole_now, uses.whole_later)


def init_only(graph, name: str) -> InitOnly:
    """What of the notebook value ``name`` only the init cells of ``graph`` (a
    :class:`~workbench.fdg.graph.Graph`) read, as they run (see the module's doc)."""
    by_init: dict[str, dict[str, None]] = {}  # field → fragments whose init cells read it now
    whole_at_init: dict[str, None] = {}  # fragments whose init cells read the value at all
    elsewhere: set[str] = set()  # fields other code mentions
    mentioned_elsewhere = used_whole_elsewhere = False
    for fragment in graph.fragments.values():
        for rate, cell in fragment.cells.items():
            reads = field_reads(cell.code, name)
            if rate == "init":
                if reads.now or reads.whole_now:
                    whole_at_init.setdefault(fragment.name, None)
                for read in reads.now:
                    by_init.setdefault(read, {}).setdefault(fragment.name, None)
                later, now_whole = reads.later, False
            else:
                later, now_whole = (*reads.now, *reads.later), reads.whole_now
            whole = now_whole or reads.whole_later
            elsewhere.update(later)
            mentioned_elsewhere = mentioned_elsewhere or bool(later) or whole
            used_whole_elsewhere = used_whole_elsewhere or whole
    if used_whole_elsewhere:
        return InitOnly()
    fields = {f: tuple(frags) for f, frags in by_init.items() if f not in elsewhere}
    return InitOnly(() if mentioned_elsewhere else tuple(whole_at_init), fields)
