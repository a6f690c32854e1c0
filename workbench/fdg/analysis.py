"""Find the names a cell reads and writes, from its syntax tree, in order and scope.

The FDG's edges come from this analysis: a name a fragment reads before writing it is an
*input*; a name it binds at top level is a *write*. The rules, chosen to match what a
reader of the cell would say:

- statements are visited in execution order, so ``x += 1`` reads then writes ``x`` and
  ``y = 1; print(y)`` has no input;
- a name bound anywhere in the cell (even in one branch of an ``if``) counts as written;
- names used inside functions, lambdas and comprehensions defined in the cell are reads
  (they run later, so they are inputs unless the cell binds them at top level);
- ``obj.attr = v`` and ``obj[i] = v`` mutate, they do not rebind: they read ``obj``;
- ``global`` names assigned inside a function are writes of the cell.

Example:
    >>> result = analyse_code("y = x + 1\\nz = f(y)")
    >>> result.inputs, result.writes
    (('x', 'f'), ('y', 'z'))
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from workbench.fdg.errors import FragmentSyntaxError

__all__ = ["CellAnalysis", "analyse_code", "parse_cell"]

_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class CellAnalysis:
    """What one cell reads and writes.

    ``inputs`` are names read before the cell binds them (in first-use order, builtins
    excluded); ``writes`` are names the cell binds at top level (in first-bind order).
    """

    inputs: tuple[str, ...]
    writes: tuple[str, ...]


def parse_cell(code: str, *, fragment: str = "<cell>") -> ast.Module:
    """Parse ``code``, turning a ``SyntaxError`` into a :class:`FragmentSyntaxError` that
    names the fragment and the cell line."""
    try:
        return ast.parse(code, filename=f"<fragment {fragment}>")
    except SyntaxError as exc:
        raise FragmentSyntaxError(fragment, exc.lineno, exc.msg, exc.text) from None


def analyse_code(code: str, *, fragment: str = "<cell>") -> CellAnalysis:
    """Analyse a cell's source. Raises :class:`FragmentSyntaxError` on bad syntax."""
    visitor = _TopLevelVisitor()
    visitor.visit(parse_cell(code, fragment=fragment))
    late_inputs = [n for n in visitor.late_reads if n not in visitor.writes]
    inputs = _unique([*visitor.inputs, *late_inputs])
    return CellAnalysis(
        inputs=tuple(n for n in inputs if n not in _BUILTINS or n in visitor.writes),
        writes=tuple(visitor.writes),
    )


def _unique(names):
    return list(dict.fromkeys(names))


class _TopLevelVisitor(ast.NodeVisitor):
    """Walks the module's top-level scope in execution order."""

    def __init__(self) -> None:
        self.writes: dict[str, None] = {}
        self.inputs: dict[str, None] = {}
        # reads inside nested scopes: inputs only if the cell never binds them
        self.late_reads: dict[str, None] = {}

    # -- name bookkeeping ------------------------------------------------------------
    def _read(self, name: str) -> None:
        if name not in self.writes:
            self.inputs.setdefault(name, None)

    def _write(self, name: str) -> None:
        self.writes.setdefault(name, None)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:  # Store and Del both rebind the name in this scope
            self._write(node.id)

    # -- statements where evaluation order differs from field order -------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
            self._write(node.target.id)
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._write(node.target.id)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                continue  # unknowable statically; users declare with --writes
            self._write((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._write(node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self._write(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._write(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.generic_visit(node)
        if node.rest:
            self._write(node.rest)

    # -- nested scopes -----------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_arguments_defaults(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._nested_scope(node)
        self._write(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_arguments_defaults(node.args)
        self._nested_scope(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._nested_scope(node)
        self._write(node.name)

    def _comprehension(self, node) -> None:
        # The first iterable is evaluated in the enclosing scope, right away.
        self.visit(node.generators[0].iter)
        self._nested_scope(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def _visit_arguments_defaults(self, args: ast.arguments) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)

    def _nested_scope(self, node: ast.AST) -> None:
        scope = _free_names(node)
        for name in scope.free:
            if name not in self.writes:
                self.late_reads.setdefault(name, None)
        for name in scope.global_writes:
            self._write(name)


@dataclass
class _Scope:
    free: list[str]
    global_writes: list[str]


def _free_names(node: ast.AST) -> _Scope:
    """Names a nested scope (function, lambda, class body, comprehension) reads from outside.

    Python's rule: a name bound anywhere in a function body is local to it (unless declared
    ``global``/``nonlocal``), so reads of it never reach the enclosing scope.
    """
    bound: set[str] = set()
    declared_global: set[str] = set()
    loads: list[str] = []
    nested: list[ast.AST] = []

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                bound.add(arg.arg)
        body = node.body if isinstance(node.body, list) else [node.body]
    elif isinstance(node, ast.ClassDef):
        body = node.body
    else:  # comprehension: element(s) plus every generator except the first's iterable
        body = []
        for i, gen in enumerate(node.generators):
            body.append(gen.target)
            if i:
                body.append(gen.iter)
            body.extend(gen.ifs)
        body.extend([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])

    def walk(n: ast.AST) -> None:
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            declared_global.update(n.names)
            return
        if isinstance(n, ast.Name):
            (loads.append(n.id) if isinstance(n.ctx, ast.Load) else bound.add(n.id))
            return
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
            for d in n.decorator_list:
                walk(d)
            nested.append(n)
            return
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            if not isinstance(n, ast.Lambda):
                walk(n.generators[0].iter)
            nested.append(n)
            return
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names if a.name != "*")
            return
        if isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        if isinstance(n, ast.NamedExpr):
            bound.add(n.target.id)
        if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            bound.add(n.name)
        for child in ast.iter_child_nodes(n):
            walk(child)

    for stmt in body:
        walk(stmt)

    free = [name for name in loads if name not in bound or name in declared_global]
    for inner in nested:
        free.extend(n for n in _free_names(inner).free if n not in bound or n in declared_global)
    global_writes = [n for n in bound if n in declared_global]
    return _Scope(free=_unique(free), global_writes=sorted(global_writes))
