"""The layers import one way (DESIGN.md): no import cycle anywhere in ``workbench/``
(function-level imports count too), and ``workbench.fdg`` imports nothing outside itself."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "workbench"


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Every module name ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    """Module → the workbench modules it imports (package ``__init__`` re-exports aside:
    ``import workbench as wb`` in an algorithm is the public API, not a layer edge)."""
    mods = _modules()
    return {name: {d for d in _imports(name, path) if d in mods and d != name
                   and mods[d].name != "__init__.py"}
            for name, path in mods.items() if path.name != "__init__.py"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str):
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_cycle_in_workbench():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_fdg_imports_nothing_outside_itself():
    outside = {}
    for name, path in _modules().items():
        if name.startswith("workbench.fdg"):
            bad = {d for d in _imports(name, path)
                   if (d.startswith("workbench") and not d.startswith("workbench.fdg"))
                   or d.split(".")[0] in {"IPython", "dask", "distributed", "ipywidgets", "anywidget",
                                          "bokeh", "torch"}}
            if bad:
                outside[name] = sorted(bad)
    assert not outside, f"workbench.fdg must stay pure: {outside}"
