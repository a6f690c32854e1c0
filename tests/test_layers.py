"""Imports go one way: every import in ``workbench/`` keeps to the table in workbench/layers.py.

The rule. A *unit* is a top-level package (``workbench.cluster``, all its modules and its
``__init__``), a sub-package the table names (``workbench.runtime.state``), or a top-level
module (``workbench.config``); ``workbench`` alone is the
facade, ``workbench/__init__.py``. A module may import

- modules of its own unit, and
- units in a layer strictly *below* its own (``LAYERS`` lists them from the bottom):

never a unit of its own layer, never one above. Every import counts: module-level and
function-level ones, those under ``if TYPE_CHECKING``, relative ones. An import of a
package is an import of its unit (``from workbench.profiling import profile`` depends on
``profiling/__init__.py`` and so on all it imports); ``from workbench import context`` is an
import of ``workbench.context``, ``import workbench`` one of the facade. Besides:

- no module imports another unit's ``_private`` name, nor a module of it whose name starts
  with ``_`` (``workbench.cluster._dask_compat`` is the cluster's own);
- no import cycle, between units or between modules;
- every unit is in exactly one layer, and the table names no unit that is not there;
- ``benchmarks/`` may import workbench, workbench never a benchmark; no import cycle
  between benchmark modules (but the one listed in ``KNOWN_BENCHMARK_CYCLES``);
- ``workbench.fdg`` (the bottom layer) imports no Dask, IPython, widgets, bokeh or torch;
- docs/architecture.md shows the table as it is here.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap
from dataclasses import dataclass

from workbench.layers import LAYERS

REPO = pathlib.Path(__file__).resolve().parents[1]
ROOT = REPO / "workbench"
BENCHMARKS = REPO / "benchmarks"

#: import cycles between benchmarks, known and reported (none: what two benchmarks share is
#: in benchmarks/harness.py); one listed here that is gone fails the test until taken out
KNOWN_BENCHMARK_CYCLES: list[set[str]] = []


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Module name → its file, for every ``.py`` under the package ``root`` (a package by
    its own name: ``workbench.profiling`` is ``profiling/__init__.py``)."""
    mods = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


@dataclass(frozen=True)
class Import:
    importer: str
    #: the module imported (the longest module of the tree its dotted name starts with)
    module: str
    #: the name imported from ``module`` when that name is not a module itself
    name: str | None
    line: int


def _imports(name: str, path: pathlib.Path, mods: dict[str, pathlib.Path]) -> list[Import]:
    """Every import of a module of ``mods`` that ``name`` makes, anywhere in its source."""
    root = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[tuple[str, str | None]] = []
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append((full, None) if full in mods else (base, alias.name))
        for target, imported in targets:
            if target.split(".")[0] != root:
                continue
            while target and target not in mods:  # workbench.x.y.Name → workbench.x.y
                target = target.rpartition(".")[0]
            if target:
                found.append(Import(name, target, imported, node.lineno))
    return found


def _unit(module: str, nested: set[str]) -> str:
    """The unit ``module`` belongs to: ``workbench.runtime.state.run`` → ``workbench.runtime.state``
    (a sub-package the layers name, in ``nested``, is a unit of its own);
    ``workbench.cluster.backend`` → ``workbench.cluster``; ``workbench`` stays itself."""
    parts = module.split(".")
    for depth in range(len(parts), 2, -1):
        if ".".join(parts[:depth]) in nested:
            return ".".join(parts[:depth])
    return ".".join(parts[:2])


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected parts of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            part = set()
            while True:
                top = stack.pop()
                part.add(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_violations(root: pathlib.Path, layers) -> list[str]:
    """Everything in the package at ``root`` that breaks the rule above, said as a line
    each (empty: it keeps to ``layers``)."""
    mods = _modules(root)
    layer_of: dict[str, int] = {}
    wrong = []
    for level, (layer, members, _what) in enumerate(layers):
        for unit in members:
            if unit in layer_of:
                wrong.append(f"{unit} is in two layers")
            layer_of[unit] = level
    nested = {unit for _layer, members, _what in layers for unit in members if unit.count(".") > 1}
    units = {_unit(m, nested) for m in mods}
    wrong += [f"{u} is in no layer of workbench/layers.py" for u in sorted(units - set(layer_of))]
    wrong += [f"the layers name {u}, which is not in {root.name}/" for u in sorted(set(layer_of) - units)]
    module_graph: dict[str, set[str]] = {}
    unit_graph: dict[str, set[str]] = {}
    for name, path in sorted(mods.items()):
        for imp in _imports(name, path, mods):
            if imp.module == name:
                continue
            module_graph.setdefault(name, set()).add(imp.module)
            mine, theirs = _unit(name, nested), _unit(imp.module, nested)
            if mine == theirs:
                continue
            unit_graph.setdefault(mine, set()).add(theirs)
            where = f"{path.relative_to(root.parent)}:{imp.line}"
            if mine in layer_of and theirs in layer_of and layer_of[theirs] >= layer_of[mine]:
                how = "in its own layer" if layer_of[theirs] == layer_of[mine] else "a layer above"
                wrong.append(
                    f"{where}: {mine} ({layers[layer_of[mine]][0]}) imports {imp.module}, "
                    f"{how} ({layers[layer_of[theirs]][0]})"
                )
            private = [p for p in imp.module.split(".")[2:] if _is_private(p)]
            if imp.name and _is_private(imp.name):
                private.append(imp.name)
            if private:
                wrong.append(f"{where}: {name} imports {theirs}'s private {', '.join(private)}")
    wrong += [f"import cycle between units: {' '.join(sorted(c))}" for c in _cycles(unit_graph)]
    wrong += [f"import cycle between modules: {' '.join(sorted(c))}" for c in _cycles(module_graph)]
    return wrong


def test_workbench_keeps_to_its_layers():
    wrong = layer_violations(ROOT, LAYERS)
    assert not wrong, "imports against workbench/layers.py:\n" + "\n".join(wrong)


def _write(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / next(iter(files)).split("/")[0]


FAKE_LAYERS = (
    ("base", ("fake.base",), ""),
    ("low", ("fake.low",), ""),
    ("mid", ("fake.mid", "fake.side"), ""),
    ("top", ("fake",), ""),
)
FAKE_TREE = {
    "fake/__init__.py": "from fake.mid import run\n",
    "fake/base.py": "VALUE = 1\n_SECRET = 2\n",
    "fake/low/__init__.py": "from .helpers import helper\n",
    "fake/low/helpers.py": "from fake.base import VALUE\n\ndef helper():\n    return VALUE\n",
    "fake/low/_inner.py": "X = 1\n",
    "fake/mid/__init__.py": "from fake.mid.core import run\n",
    "fake/mid/core.py": "from fake.low import helper\n\ndef run():\n    return helper()\n",
    "fake/side.py": "import fake.base\n",
}


def test_the_checker_passes_a_tree_that_keeps_to_its_layers(tmp_path):
    assert layer_violations(_write(tmp_path, FAKE_TREE), FAKE_LAYERS) == []


def test_the_checker_fails_an_upward_import_even_in_a_function(tmp_path):
    tree = {
        **FAKE_TREE,
        "fake/low/helpers.py": FAKE_TREE["fake/low/helpers.py"]
        + "\ndef later():\n    from fake.mid.core import run\n    return run()\n",
    }
    wrong = layer_violations(_write(tmp_path, tree), FAKE_LAYERS)
    assert any(
        "fake/low/helpers.py:7: fake.low (low) imports fake.mid.core, a layer above (mid)" in w for w in wrong
    ), wrong
    assert any(w.startswith("import cycle between units: fake.low fake.mid") for w in wrong), wrong


def test_the_checker_counts_an_import_of_a_package_init_and_a_relative_one(tmp_path):
    # `from ..mid import run` in fake/low: the mid package's __init__, a layer above
    tree = {**FAKE_TREE, "fake/low/more.py": "from ..mid import run\n"}
    wrong = layer_violations(_write(tmp_path, tree), FAKE_LAYERS)
    assert wrong == [
        "fake/low/more.py:1: fake.low (low) imports fake.mid, a layer above (mid)",
        "import cycle between units: fake.low fake.mid",
    ], wrong


def test_the_checker_fails_a_sideways_import_a_private_name_and_a_unit_in_no_layer(tmp_path):
    tree = {
        **FAKE_TREE,
        "fake/side.py": "from fake.mid import run\nfrom fake.base import _SECRET\nfrom fake.low import _inner\n",
        "fake/extra.py": "",
    }
    wrong = layer_violations(_write(tmp_path, tree), FAKE_LAYERS)
    assert wrong == [
        "fake.extra is in no layer of workbench/layers.py",
        "fake/side.py:1: fake.side (mid) imports fake.mid, in its own layer (mid)",
        "fake/side.py:2: fake.side imports fake.base's private _SECRET",
        "fake/side.py:3: fake.side imports fake.low's private _inner",
    ], wrong


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _benchmark_imports(source: str) -> set[str]:
    """The benchmark modules (by name, ``__init__`` for the package itself) a benchmark's
    source imports: as the package's (``benchmarks.harness``, ``from benchmarks import
    harness``), relatively (``from . import harness``, ``from .harness import median``) or
    by a bare name (``import bench_peers``, a script run with benchmarks/ as its folder)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top, _, rest = alias.name.partition(".")
                found.add(rest.split(".")[0] or "__init__" if top == "benchmarks" else top)
        elif isinstance(node, ast.ImportFrom):
            package, _, rest = (node.module or "").partition(".")
            if node.level or package == "benchmarks":
                module = rest if package == "benchmarks" else node.module
                # ``from benchmarks import harness`` / ``from . import harness``: the names are modules
                found |= {module.split(".")[0]} if module else {alias.name for alias in node.names} | {"__init__"}
            elif node.module:
                found.add(package)
    return found


def _benchmark_graph() -> dict[str, set[str]]:
    """Benchmark module → the benchmark modules it imports."""
    names = {path.stem for path in BENCHMARKS.glob("*.py")}
    return {
        path.stem: (_benchmark_imports(path.read_text()) & names) - {path.stem}
        for path in sorted(BENCHMARKS.glob("*.py"))
    }


def test_the_benchmark_graph_reads_package_relative_and_bare_imports():
    source = (
        "import benchmarks.harness\nfrom benchmarks import bench_peers, device_wheels\n"
        "from benchmarks.device_check_llm import part_llm\nfrom . import soak\nfrom .against import main\n"
        "import bench_policies\nfrom bench_llm_rl import SIZES\nimport json\n"
    )
    assert _benchmark_imports(source) == {
        "harness",
        "bench_peers",
        "device_wheels",
        "device_check_llm",
        "soak",
        "__init__",
        "against",
        "bench_policies",
        "bench_llm_rl",
        "json",
    }


def test_no_benchmark_edits_sys_path():
    """A benchmark runs as ``python -m benchmarks NAME`` from the checkout: it imports the others
    as the package's, never by putting a folder on ``sys.path``."""
    wrong = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in sorted(BENCHMARKS.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and node.attr in ("insert", "append", "extend")
        and ast.unparse(node.value) == "sys.path"
    ]
    assert not wrong, wrong


def test_workbench_never_imports_a_benchmark():
    names = {path.stem for path in BENCHMARKS.glob("*.py")} | {"benchmarks"}
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            wrong += [f"{path.relative_to(REPO)}:{node.lineno} imports {top}" for top in tops if top in names]
    assert not wrong, wrong


def test_no_import_cycle_between_benchmarks():
    cycles = _cycles(_benchmark_graph())
    assert cycles == KNOWN_BENCHMARK_CYCLES, (
        f"import cycles between benchmarks: {cycles}; known and reported: {KNOWN_BENCHMARK_CYCLES} "
        "(one fixed: take it out of KNOWN_BENCHMARK_CYCLES)"
    )


def test_fdg_imports_no_dask_ipython_widgets_or_torch():
    """(That it imports nothing else of workbench is its layer's rule: it is the bottom one.)"""
    outside = {}
    for path in (ROOT / "fdg").rglob("*.py"):
        bad = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            bad |= {
                n
                for n in names
                if n.split(".")[0] in {"IPython", "dask", "distributed", "ipywidgets", "anywidget", "bokeh", "torch"}
            }
        if bad:
            outside[path.name] = sorted(bad)
    assert not outside, f"workbench.fdg must stay pure: {outside}"


def layers_table() -> str:
    """docs/architecture.md's table of the layers, top first, from ``LAYERS``."""
    rows = ["| layer | packages and modules | what they hold |", "| --- | --- | --- |"]
    for level, (layer, members, what) in reversed(list(enumerate(LAYERS))):
        rows.append(f"| {level} {layer} | {', '.join(f'`{m}`' for m in members)} | {what} |")
    return "\n".join(rows)


def test_the_architecture_page_shows_the_layers_as_they_are():
    page = (REPO / "docs" / "architecture.md").read_text()
    assert layers_table() in page, (
        "docs/architecture.md's table of layers differs from workbench/layers.py; "
        "the table as it is:\n\n" + layers_table()
    )
