"""Find the names a cell reads and writes, from its syntax tree, in order and scope.

The FDG's edges come from this analysis: a name a fragment reads before writing it is an
*input*; a name it binds at top level is a *write*. The rules, chosen to match what a
reader of the cell would say:

- statements are visited in execution order, so ``x += 1`` reads then writes ``x`` and
  ``y = 1; print(y)`` has no input;
- a name bound anywhere in the cell (even in one branch of an ``if``) counts as written;
- names used inside functions, lambdas and generator expressions defined in the cell are
  reads that run later, so they are inputs unless the cell binds them at top level;
- list/set/dict comprehensions and class bodies run at once: their reads are ordinary reads;
  a class body does not enclose its methods, whose free names are global lookups;
- defaults, decorators, annotations and class bases run where the ``def``/``class`` is;
- ``obj.attr = v`` and ``obj[i] = v`` mutate, they do not rebind: they read ``obj``;
- ``x: T`` without a value reads ``T`` but binds nothing;
- ``global`` names assigned inside a function (at any depth), and ``:=`` inside a
  comprehension (PEP 572), are writes of the cell.

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
    names the fragment and the cell line.

    The cell is also compiled, because some code parses but cannot run as a cell: the
    parser accepts a top-level ``return``, ``yield``, ``await`` or ``break``, and only the
    compiler refuses them. Refusing them here makes them registration errors with the cell
    line, not run-time failures deep in a replica.

    >>> parse_cell("if done:\\n    return", fragment="actor")
    Traceback (most recent call last):
    ...
    workbench.fdg.errors.FragmentSyntaxError: fragment 'actor': syntax error at cell line 2: return ('return' outside function: a cell runs as top-level code, not as a function body; use if/else instead). Fix the cell and run it again; the FDG is unchanged.
    """
    filename = f"<fragment {fragment}>"
    try:
        tree = ast.parse(code, filename=filename)
        compile(tree, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        lines = code.splitlines()
        text = exc.text or (lines[exc.lineno - 1] if exc.lineno and exc.lineno <= len(lines) else None)
        raise FragmentSyntaxError(fragment, exc.lineno, _explained(exc.msg), text) from None
    return tree


def _explained(msg: str) -> str:
    """The compiler's message, with what to do when the cause is that a cell is not a
    function (``return``/``yield``/``await`` at its top level)."""
    if "outside function" in msg or "outside async function" in msg or "outside of an async" in msg:
        return f"{msg}: a cell runs as top-level code, not as a function body; use if/else instead"
    return msg


def analyse_code(code: str, *, fragment: str = "<cell>") -> CellAnalysis:
    """Analyse a cell's source. Raises :class:`FragmentSyntaxError` on bad syntax."""
    visitor = _ModuleScope()
    visitor.visit(parse_cell(code, fragment=fragment))
    writes = visitor.bound
    late_inputs = [n for n in visitor.late_reads if n not in writes]
    inputs = _unique([*visitor.inputs, *late_inputs])
    return CellAnalysis(
        inputs=tuple(n for n in inputs if n not in _BUILTINS or n in writes),
        writes=tuple(writes),
    )


def _unique(names):
    return list(dict.fromkeys(names))


# What a nested scope tells the scope around it, in execution order.
_READ = "read"  # a free name read now, while the enclosing scope runs
_LATE = "late"  # a free name read later (the body of a function, lambda or genexp)
_GLOBAL = "global"  # a ``global`` name rebound: a write of the cell, however deep
_LEAK = "leak"  # a ``:=`` in a comprehension: binds in the enclosing scope (PEP 572)


class _Scope(ast.NodeVisitor):
    """Walks one scope's code in execution order, recording what it binds and reporting its
    free reads and escaping bindings as events (``self.events``) for the enclosing scope.

    Every nested scope is walked by its own ``_Scope`` subclass, so the same statement rules
    (and the eager parts of ``def``/``class``/comprehensions) hold at every depth.
    """

    defers = False  # True where the body runs later than the code that defines it
    encloses = True  # False for class bodies: their names are invisible to nested scopes

    def __init__(self) -> None:
        self.bound: dict[str, None] = {}  # names bound here so far, in first-bind order
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()
        self.events: list[tuple[str, str]] = []

    def run(self, nodes: list[ast.AST]) -> list[tuple[str, str]]:
        for node in nodes:
            self.visit(node)
        return self.events

    # -- name bookkeeping ------------------------------------------------------------
    def _emit(self, kind: str, name: str) -> None:
        self.events.append((kind, name))

    def _sees(self, name: str) -> bool:
        return name in self.bound

    def _read(self, name: str, *, late: bool = False) -> None:
        if not self._sees(name):
            self._emit(_LATE if late or self.defers else _READ, name)

    def _write(self, name: str) -> None:
        if name in self.globals:
            self._emit(_GLOBAL, name)
        elif name not in self.nonlocals:  # a nonlocal rebinds a local of an enclosing function
            self.bound.setdefault(name, None)

    def _leaked(self, name: str) -> None:
        """A ``:=`` in a nested comprehension bound ``name`` in this scope."""
        self._write(name)

    def _receive(self, kind: str, name: str) -> None:
        if kind == _GLOBAL:
            self._emit(_GLOBAL, name)
        elif kind == _LEAK:
            self._leaked(name)
        elif self.encloses:
            self._read(name, late=kind == _LATE)
        else:  # skip this scope's names, keep the read's timing
            self._emit(_LATE if kind == _LATE or self.defers else _READ, name)

    def _nested(self, scope: _Scope, nodes: list[ast.AST]) -> None:
        for kind, name in scope.run(nodes):
            self._receive(kind, name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:  # Store and Del both rebind the name in this scope
            self._write(node.id)

    def visit_Global(self, node: ast.Global) -> None:
        self.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.nonlocals.update(node.names)

    # -- statements where evaluation order differs from field order -------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        # A bare ``x: T`` only annotates x; ``obj.attr: T`` still evaluates obj.
        if node.value is not None or not isinstance(node.target, ast.Name):
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

    # -- nested scopes: the header runs here, the body in its own scope ---------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *_defaults(node.args), *_annotations(node.args)]:
            self.visit(expr)
        if node.returns is not None:
            self.visit(node.returns)
        self._nested(_FunctionScope(node.args), node.body)
        self._write(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in _defaults(node.args):
            self.visit(expr)
        self._nested(_FunctionScope(node.args), [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._nested(_ClassScope(), node.body)
        self._write(node.name)

    def _comprehension(self, node) -> None:
        # The first iterable is evaluated in the enclosing scope, right away.
        self.visit(node.generators[0].iter)
        scope = _ComprehensionScope(lazy=isinstance(node, ast.GeneratorExp))
        self._nested(scope, _comprehension_parts(node))

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


class _ModuleScope(_Scope):
    """The cell's top level: ``bound`` is its writes; free reads are its inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict[str, None] = {}
        # reads inside deferred scopes: inputs only if the cell never binds them
        self.late_reads: dict[str, None] = {}
        # ``:=`` bindings leaked by comprehensions in the current statement, not yet listed
        self.pending: dict[str, None] = {}

    def visit(self, node: ast.AST) -> None:
        # A statement's own targets are listed before the names its comprehensions leak
        # (``vals = [y for x in xs if (y := g(x))]`` writes vals, then y); a nested
        # statement comes after its header, so flush on the way in too.
        is_stmt = isinstance(node, ast.stmt)
        if is_stmt:
            self._flush_pending()
        super().visit(node)
        if is_stmt:
            self._flush_pending()

    def _flush_pending(self) -> None:
        for name in self.pending:
            self._write(name)
        self.pending.clear()

    def _sees(self, name: str) -> bool:
        return name in self.bound or name in self.pending

    def _emit(self, kind: str, name: str) -> None:
        if kind == _READ:
            self.inputs.setdefault(name, None)
        elif kind == _LATE:
            self.late_reads.setdefault(name, None)
        else:  # _GLOBAL
            self._write(name)

    def _leaked(self, name: str) -> None:
        self.pending.setdefault(name, None)

    def visit_Global(self, node: ast.Global) -> None:
        pass  # at top level ``global`` changes nothing


class _ClassScope(_Scope):
    """A class body: runs at once, in order; a name it binds later is still read outside
    first. Methods and comprehensions in it do not see its names (``encloses``)."""

    encloses = False


class _StaticScope(_Scope):
    """A function-like scope: a name bound anywhere in it is local throughout (Python
    decides at compile time), so reads of it never reach the enclosing scope, even reads
    made before the binding. ``run`` drops them once all bindings are known."""

    def run(self, nodes: list[ast.AST]) -> list[tuple[str, str]]:
        events = super().run(nodes)
        return [(kind, name) for kind, name in events if kind not in (_READ, _LATE) or name not in self.bound]


class _FunctionScope(_StaticScope):
    """A function or lambda body: runs when called, so every free read is late."""

    defers = True

    def __init__(self, args: ast.arguments) -> None:
        super().__init__()
        for arg in [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]:
            if arg is not None:
                self._write(arg.arg)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        super().visit_AnnAssign(node)
        # Unlike at top level, a bare ``x: T`` in a function makes x local (compile time).
        if isinstance(node.target, ast.Name):
            self._write(node.target.id)


class _ComprehensionScope(_StaticScope):
    """A comprehension: its targets are local; a list/set/dict comprehension runs at once,
    a generator expression only when consumed (``lazy``)."""

    def __init__(self, *, lazy: bool) -> None:
        super().__init__()
        self.defers = lazy

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._emit(_LEAK, node.target.id)

    def _leaked(self, name: str) -> None:
        self._emit(_LEAK, name)  # from a comprehension nested in this one: pass it on


def _comprehension_parts(node) -> list[ast.AST]:
    """A comprehension's own code in execution order, less the first iterable (which the
    enclosing scope runs): per generator its iterable, target and conditions, then the
    element(s)."""
    parts: list[ast.AST] = []
    for i, gen in enumerate(node.generators):
        parts.extend([gen.iter, gen.target] if i else [gen.target])
        parts.extend(gen.ifs)
    parts.extend([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])
    return parts


def _defaults(args: ast.arguments) -> list[ast.expr]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _annotations(args: ast.arguments) -> list[ast.expr]:
    """Parameter annotations, which run with the ``def`` (the return one is separate)."""
    params = [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]
    return [p.annotation for p in params if p is not None and p.annotation is not None]
