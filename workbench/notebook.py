"""Read a notebook's FDG without Jupyter: its fragment cells, the ordinary cells they
need, and the options of its ``%fdg run`` line.

An ordinary cell is *needed* when it defines a name a fragment reads from the notebook,
or a name another needed cell reads (followed transitively). Cells that only plot or
inspect results are skipped. Lines that are IPython syntax (``%magic``, ``!shell``) are
dropped from ordinary cells: headless runs have no IPython.

Example:
    >>> fdg, options = load_notebook("notebooks/quickstart.ipynb")   # doctest: +SKIP
    >>> options["iterations"]                                       # doctest: +SKIP
    250
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from workbench.fdg.analysis import analyse_code
from workbench.errors import FragmentError, NotebookCellError, RunConfigError
from workbench.config import parse_run_line
from workbench.session import FDG

__all__ = ["load_notebook", "notebook_cells", "apply_overrides"]


def notebook_cells(path: str | Path) -> list[str]:
    """The code cells' sources, in order. Raises :class:`RunConfigError` for a missing or
    unreadable notebook.

    A version-4 notebook (every Jupyter since 2015) is read as the JSON it is: importing
    ``nbformat`` costs ~1.2 s here (its validator pulls in jsonschema's format checkers),
    a fifth of a whole ``workbench run``. Older versions go through ``nbformat``'s
    conversion.

    >>> import json, tempfile
    >>> cells = [{"cell_type": "markdown", "source": "# hi"},
    ...          {"cell_type": "code", "source": ["x = 1\\n", "y = 2"]}]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as f:
    ...     json.dump({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}, f)
    >>> notebook_cells(f.name)
    ['x = 1\\ny = 2']
    """
    path = Path(path)
    if not path.exists():
        raise RunConfigError(f"notebook not found: {str(path)!r}. Check the path (it is relative to {Path.cwd()}).")
    if path.suffix == ".py":  # it would be "not JSON", which says nothing of what to do
        raise RunConfigError(
            f"{str(path)!r} is a Python script: `workbench run` trains a notebook's "
            f"%%fragment cells (an .ipynb). Run a script that builds its FDG with "
            f"`python {path}`."
        )
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat", 4) != 4:
            return _cells_via_nbformat(path)
        return ["".join(_source(cell)) for cell in nb["cells"] if cell.get("cell_type") == "code"]
    except RunConfigError:
        raise
    except Exception as exc:  # not JSON, not UTF-8, cells that are not cells
        raise RunConfigError(f"cannot read {str(path)!r} as a notebook: {exc}") from None


def _source(cell: dict) -> list[str] | str:
    source = cell.get("source", "")
    if not isinstance(source, (str, list)):
        raise ValueError(f"a cell's source is {type(source).__name__}, not text")
    return source


def _cells_via_nbformat(path: Path) -> list[str]:
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several types for bad JSON / schema
        raise RunConfigError(f"cannot read {str(path)!r} as a notebook: {exc}") from None
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def load_notebook(path: str | Path, overrides: list[str] = ()) -> tuple[FDG, dict]:
    """Build the notebook's FDG (with its namespace filled by the needed ordinary cells)
    and return it with the options of the notebook's last ``%fdg run`` line.

    ``overrides`` are ``NAME.FIELD=VALUE`` strings (``workbench run --set``): each changes
    a field of a notebook object right after the cell that defines it, so later cells and
    the ``%fdg run`` line see the new value."""
    pending = _parse_overrides(overrides)
    fdg = FDG()
    ordinary: list[str] = []
    numbers: list[int] = []  # each ordinary cell's code cell number, for errors
    run_line, run_cell = "", None
    cells = notebook_cells(path)
    # the FDG as the run finds it at its line: a %%fragment cell below it would, in Jupyter,
    # run later (a live edit of a background run), not be part of the run from its start
    last_run = max(
        (n for n, source in enumerate(cells, start=1) if any(_RUN_LINE.match(line) for line in source.splitlines())),
        default=len(cells) + 1,
    )
    for number, source in enumerate(cells, start=1):
        stripped = source.lstrip()
        if stripped.startswith("%%fragment"):
            if number > last_run:
                continue
            first, _, body = stripped.partition("\n")
            try:
                fdg.add_cell(first, body)
            except FragmentError as exc:
                raise FragmentError(
                    f"{path}, code cell {number}: {exc}", fragment=exc.fragment, line=exc.line
                ) from None
            continue
        for line in source.splitlines():
            match = _RUN_LINE.match(line)
            if match:
                run_line, run_cell = match.group(1), len(ordinary)
        ordinary.append(_python_only(source))
        numbers.append(number)
    if not fdg.fragments:  # before running any cell: a notebook of Python-built runs would train them all
        raise RunConfigError(
            f"{path} has no %%fragment cells: `workbench run` trains the FDG a notebook's "
            "%%fragment cells build, and this one builds its runs in Python cells. Run it "
            f"in Jupyter, or headless with `jupyter nbconvert --to notebook --execute {path}`."
        )
    namespace: dict = {"__name__": "__main__"}
    # what the run sees at its %fdg run line: cells after it (looking at results, or changing a
    # config while a background run trains) are never run before it
    before_run = ordinary if run_cell is None else ordinary[: run_cell + 1]
    needed = {id(s) for s in _needed(before_run, set(fdg.notebook_names()) | {o[0] for o in pending})}
    for number, source in zip(numbers, ordinary):
        if id(source) not in needed:  # the very cells _needed kept (equal sources may differ)
            continue
        _run_cell(path, number, source, namespace)
        pending = [o for o in pending if not _apply_if_defined(o, namespace)]
    if pending:
        names = ", ".join(sorted({o[0] for o in pending}))
        raise RunConfigError(
            f"--set: the notebook defines no {names} (in a cell that runs headless). "
            f"--set changes a field of an object an ordinary cell defines, e.g. "
            f"--set cfg.seed=3 for cfg = PPOConfig()."
        )
    _say_unreadable_cells(path, fdg, namespace, zip(numbers, before_run))
    fdg.namespace = namespace
    options = parse_run_line(_expand(path, run_line, namespace)) if run_line else {}
    options.pop("background", None)  # headless: the run is the whole job
    return fdg, options


def apply_overrides(namespace: dict, overrides: list[str]) -> None:
    """Apply ``NAME.FIELD=VALUE`` overrides to objects in ``namespace``.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Config:
    ...     seed: int = 1
    ...     lr: float = 0.1
    >>> ns = {"cfg": Config()}
    >>> apply_overrides(ns, ["cfg.seed=3", "cfg.lr=1e-3"])
    >>> ns["cfg"]
    Config(seed=3, lr=0.001)
    >>> apply_overrides(ns, ["cfg.sed=3"])
    Traceback (most recent call last):
    ...
    workbench.errors.RunConfigError: --set cfg.sed=3: Config has no field 'sed' (did you mean 'seed'?); its fields: seed, lr.
    """
    for override in _parse_overrides(overrides):
        if not _apply_if_defined(override, namespace):
            raise RunConfigError(f"--set {override[3]}: no {override[0]!r} is defined.")


def _parse_overrides(overrides) -> list[tuple[str, str, object, str]]:
    """(name, field, value, text) for each ``NAME.FIELD=VALUE``; VALUE is a Python literal,
    else the string as written (``--set cfg.env_id=Acrobot-v1``)."""
    import ast

    parsed = []
    for text in overrides:
        target, eq, raw = text.partition("=")
        name, dot, field_name = target.strip().partition(".")
        if not eq or not dot or not name.isidentifier() or not field_name.isidentifier():
            raise RunConfigError(f"--set {text!r}: write NAME.FIELD=VALUE, e.g. --set cfg.seed=3.")
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        parsed.append((name, field_name, value, text))
    return parsed


def _apply_if_defined(override, namespace: dict) -> bool:
    """Apply one override if its object is defined yet; True when applied."""
    import dataclasses
    import difflib

    name, field_name, value, text = override
    if name not in namespace:
        return False
    obj = namespace[name]
    fields = _fields_of(obj)
    if fields is None:
        raise RunConfigError(
            f"--set {text}: {name} is a {type(obj).__name__}, which has no fields to set; "
            "--set changes a field of a dataclass, of an object of your own class, or a key "
            "of a dict, e.g. --set cfg.seed=3."
        )
    if field_name not in fields:
        hint = difflib.get_close_matches(field_name, fields, n=1)
        raise RunConfigError(
            f"--set {text}: {type(obj).__name__} has no field {field_name!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; its fields: {', '.join(fields)}."
        )
    keyed = isinstance(obj, dict)
    current = obj[field_name] if keyed else getattr(obj, field_name)
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # --set cfg.learning_rate=1 means 1.0
    elif current is not None and (
        not isinstance(value, type(current))  # True is an int to isinstance
        or isinstance(value, bool) != isinstance(current, bool)
    ):
        raise RunConfigError(
            f"--set {text}: {name}.{field_name} is a {type(current).__name__} "
            f"({current!r}); {value!r} is a {type(value).__name__}."
        )
    if dataclasses.is_dataclass(obj) and getattr(type(obj), "__dataclass_params__").frozen:
        namespace[name] = dataclasses.replace(obj, **{field_name: value})
    elif keyed:
        obj[field_name] = value
    else:
        setattr(obj, field_name, value)  # on the object: a class's default stays as it is
    return True


def _fields_of(obj) -> list[str] | None:
    """What ``--set NAME.FIELD=…`` may change on ``obj``: a dataclass's fields; a dict's
    keys that are names; an object's public attributes, its class's plain values included
    (``class Cfg: lr = 0.1``); None for what has none (a number, a string, a module).

        >>> class Cfg:
        ...     lr = 0.1
        ...     def scaled(self): return self.lr * 2
        >>> _fields_of(Cfg()), _fields_of({"n": 8, "not a name": 1}), _fields_of(3)
        (['lr'], ['n'], None)
    """
    import dataclasses
    import inspect

    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    if isinstance(obj, dict):
        return [k for k in obj if isinstance(k, str) and k.isidentifier()]
    if not hasattr(obj, "__dict__") or inspect.ismodule(obj):
        return None
    # in the order they were written: base classes first, then the object's own (not object's)
    owners = [obj] if isinstance(obj, type) else [*reversed(type(obj).__mro__[:-1]), obj]
    fields: dict[str, None] = {}
    for owner in owners:
        for key, value in vars(owner).items():
            plain = not (callable(value) or isinstance(value, (property, classmethod, staticmethod)))
            if not key.startswith("_") and plain:
                fields[key] = None
    return list(fields)


# `%fdg run …` alone or assigned (`run = %fdg run …`)
_RUN_LINE = re.compile(r"^\s*(?:\w+\s*=\s*)?%fdg\s+(run\b.*)$")
_MAGIC_LINE = re.compile(r"^\s*(?:\w+\s*=\s*)?[%!]")


def _run_cell(path, number: int, source: str, namespace: dict) -> None:
    """Run one ordinary cell; its error is one line naming the code cell (a headless run
    has no notebook to show the traceback in: ``workbench run --verbose`` prints it).

    >>> _run_cell("nb.ipynb", 3, "import does_not_exist_xyz", {})
    Traceback (most recent call last):
    ...
    workbench.errors.NotebookCellError: nb.ipynb, code cell 3 (an ordinary cell the fragments need), raised at line 1: ModuleNotFoundError: No module named 'does_not_exist_xyz'. Fix the cell (or the environment) and run again.
    """
    import traceback

    filename = f"<{Path(path).name}, code cell {number}>"
    try:
        exec(compile(source, filename, "exec"), namespace)
    except (Exception, SystemExit) as exc:  # sys.exit() in a cell must not end workbench run silently
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
        where = f", raised at line {frames[-1].lineno}" if frames else ""
        text = str(exc)
        raise NotebookCellError(
            f"{path}, code cell {number} (an ordinary cell the fragments need){where}: "
            f"{type(exc).__name__}{': ' + text if text else ''}. Fix the cell (or the environment) "
            "and run again."
        ) from exc


def _expand(path, line: str, namespace: dict) -> str:
    """IPython's ``{expression}`` expansion in magic lines, evaluated in the notebook's namespace."""

    def value(match) -> str:
        try:
            return str(eval(match.group(1), namespace))
        except Exception as exc:
            raise NotebookCellError(
                f"{path}: the %fdg run line's {{{match.group(1)}}} cannot be "
                f"evaluated ({type(exc).__name__}: {exc}). Define the name in an "
                "ordinary cell, or write the value."
            ) from exc

    return re.sub(r"\{([^{}]+)\}", value, line)


def _say_unreadable_cells(path, fdg: FDG, namespace: dict, cells) -> None:
    """A name the fragments read that no cell defined, where an ordinary cell before the run
    is not Python: that cell is the likely why, so the error names it (it said only "no
    fragment writes it and the notebook does not define it", the syntax error unsaid)."""
    import builtins

    missing = sorted(n for n in fdg.notebook_names() if n not in namespace and not hasattr(builtins, n))
    if not missing:
        return
    for number, source in cells:
        try:
            compile(source, f"<code cell {number}>", "exec")
        except SyntaxError as exc:
            raise NotebookCellError(
                f"{path}: the fragments read {', '.join(map(repr, missing))}, which no cell that runs "
                f"headless defines, and code cell {number} is not Python (line {exc.lineno}: {exc.msg}), "
                "so what it defines cannot be known. Fix that cell and run again."
            ) from None


def _python_only(source: str) -> str:
    return "\n".join("" if _MAGIC_LINE.match(line) else line for line in source.splitlines())


def _needed(cells: list[str], wanted: set[str]) -> list[str]:
    """The cells that define ``wanted`` names or change them in place (``cfg.model =
    start``: a warm start handing the fragments its model), with the cells those depend
    on, in order."""
    analyses = []
    for source in cells:
        try:
            analyses.append((analyse_code(source), _changed_in_place(source)))
        except (FragmentError, SyntaxError):
            analyses.append(None)  # not Python: never needed
    keep = [False] * len(cells)
    for index in range(len(cells) - 1, -1, -1):
        found = analyses[index]
        if found is not None and wanted & (set(found[0].writes) | found[1]):
            keep[index] = True
            wanted |= set(found[0].inputs)
    return [source for source, kept in zip(cells, keep) if kept]


def _changed_in_place(source: str) -> set[str]:
    """Names whose attributes or items a cell assigns (``cfg.model = …``, ``table[k] += 1``,
    ``del obj.x``): the object is the same, so the dataflow analysis sees no write, but a
    fragment reading it reads the change.

    >>> sorted(_changed_in_place("cfg.model = start\\nlr = 1\\nstats['n'] += 1\\na.b.c = 2\\nprint(cfg)"))
    ['a', 'cfg', 'stats']
    """
    import ast

    changed = set()
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets
            if isinstance(node, (ast.Assign, ast.Delete))
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            for part in ast.walk(target):  # tuples of targets too: a, cfg.x = …
                if isinstance(part, (ast.Attribute, ast.Subscript)) and isinstance(part.ctx, (ast.Store, ast.Del)):
                    root = part.value
                    while isinstance(root, (ast.Attribute, ast.Subscript)):
                        root = root.value
                    if isinstance(root, ast.Name):
                        changed.add(root.id)
    return changed
