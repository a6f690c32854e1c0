"""What an edit made while a run trains does at the boundary it lands at
(docs/live_changes.md), under inline and every cluster policy alike.

- The changes asked for since the last stretch was planned are noted where the next one
  starts (:func:`note_changes`), together with the FDG it plans from, so the iteration
  ``run.events`` names is the one the new cells ran from; those the run ended before are
  said not applied (:func:`say_unapplied`).
- An **init cell re-run mid-run** runs once more at that boundary, in each replica of its
  fragment, and the fragment's kept state is laid back over what it built
  (:func:`with_new_init_names`): the names the cell adds get their first values there, and
  every name the fragment had (weights, optimiser, envs mid-episode, counters) keeps its
  trained value. :func:`init_edit_notice` says which names are which when the cell is
  re-run. The replica's machinery is the one a snapshot that left out an unpicklable value
  uses (``REBUILT_KEY``: run the init cell, lay the saved values over), so every backend
  does the same.
- A **value sent with** ``%fdg update`` reaches the step and iteration cells from the
  boundary on, but no init cell runs again for it: a part of the value only init cells
  read (``cfg.hidden``, by the cell that builds the network) changes nothing in this run.
  Those parts are copied where the run's first stretch takes its values
  (:func:`kept_init_values`); an update that changes one says so, naming it and the init
  cells, and that it takes effect at the next run (:func:`init_only_changes`,
  :func:`init_only_notice`). Only what the cells' syntax trees prove is claimed
  (:mod:`workbench.fdg.fields`); where they cannot tell, the update says nothing more.

Example:
    >>> from workbench.fdg.fragment import Fragment
    >>> old = Fragment("env").with_cell("init", "envs = make()\\nobs = envs.reset()")
    >>> new = old.with_cell("init", "envs = make()\\nobs = envs.reset()\\nmarker = 7.0")
    >>> init_edit_notice(old, new)
    'it runs there in each replica of env to give marker a first value; envs, obs keep their trained values'
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Iterable, Mapping

from workbench.fdg.fields import init_only
from workbench.runtime.state.counting import REBUILT_KEY, RESERVED

__all__ = [
    "note_changes",
    "kept_init_values",
    "say_unapplied",
    "with_new_init_names",
    "init_edit_notice",
    "NEW_IN_INIT",
    "init_only_changes",
    "init_only_notice",
]

#: the label a name the edited init cell adds gets among the names its replicas build again
NEW_IN_INIT = "new in the edited init cell"


def note_changes(run, changes: Iterable[tuple[str, str]], start: int) -> None:
    """Note each of ``changes`` (kind, what changed) in ``run`` as applying from ``start``,
    the iteration the stretch being planned begins with (the trainer calls it with its lock
    held, while taking the FDG the stretch runs, and then forgets them)."""
    for kind, what in changes:
        run.note(kind, f"{what}: applies from iteration {start}", start)


def kept_init_values(fdg, namespace) -> dict:
    """(name, part) → a copy of each part of a notebook value only init cells read, as the
    run's first stretch gives it to them: what :func:`init_only_changes` compares an update
    with. A notebook object that resists looking into gives none: the update's notice then
    claims nothing, and the run goes on."""
    try:
        return _init_values(fdg, namespace)
    except Exception:  # noqa: BLE001
        return {}


def say_unapplied(run, changes: Iterable[tuple[str, str]], pending) -> None:
    """The ``changes`` (kind, what changed) and re-placement (``pending``, or None) still
    held once the run has ended (its last iteration, solved, stopped) at the boundary they
    waited for: said in ``run``, not dropped quietly (the trainer then forgets them)."""
    asked = [what for _, what in changes]
    if pending is not None:
        asked.append(f"re-placement under {getattr(pending, 'name', pending)}")
    if not asked:
        return
    why = (
        "it finished its iterations"
        if run.completed_iterations >= run.iterations
        else "it was solved"
        if run.is_solved()
        else "it was stopped"
    )
    run.note(
        "not applied",
        f"{'; '.join(asked)}: not applied, the run ended first ({why} at iteration {run.completed_iterations})",
        run.completed_iterations,
    )


def _init_names(fragment) -> tuple[str, ...]:
    cell = fragment.cells.get("init")
    return tuple(n for n in (cell.writes if cell else ()) if n != "replica" and n not in RESERVED)


def with_new_init_names(plan, states: dict[tuple[str, int], dict] | None) -> dict | None:
    """``states`` (as :func:`~workbench.stretch_state.states_for` lays them out), where a
    fragment's init cell binds names its kept state lacks — an init cell edited mid-run —
    marked so that its replica runs the init cell and then lays the kept state over what it
    built. The kept states themselves are not changed (``run.state`` stays as it was)."""
    if not states:
        return states
    out = {}
    for key, fragments in states.items():
        out[key] = dict(fragments)
        for frag, values in fragments.items():
            if type(values) is not dict or frag not in plan.fdg.fragments:
                continue  # a checkpoint's PortableState runs its init cell anyway
            if not any(k not in RESERVED for k in values):
                continue  # only counters: the init cell builds the fragment afresh anyway
            missing = [n for n in _init_names(plan.fdg[frag]) if n not in values]
            if missing:
                rebuilt = {**(values.get(REBUILT_KEY) or {}), **dict.fromkeys(missing, NEW_IN_INIT)}
                out[key][frag] = {**values, REBUILT_KEY: rebuilt}
    return out


def init_edit_notice(old, new) -> str:
    """What a re-run init cell of fragment ``new`` (``old``: the fragment before it, or
    None) does at the boundary it lands at, for the notebook's notice."""
    had = set(old.writes) if old is not None else set()
    names = _init_names(new)
    added = [n for n in names if n not in had]
    kept = [n for n in names if n in had]
    where = f"it runs there in each replica of {new.name}"
    one = len(kept) == 1
    keep = f"{', '.join(kept)} {'keeps its trained value' if one else 'keep their trained values'}"
    if added:
        first = "a first value" if len(added) == 1 else "their first values"
        text = f"{where} to give {', '.join(added)} {first}"
        return f"{text}; {keep}" if kept else text
    kept_text = f": {keep} (the fragment keeps its state)" if kept else ""
    return (
        f"it adds no name, so it changes nothing in this run{kept_text}. It is the init cell of "
        "the next run; to change a value now, assign it in an iteration cell, or pass it with "
        "%fdg update / fdg.update"
    )


# -- values only init cells read ---------------------------------------------------------
#: a part of a value that cannot be read or copied: never compared, never claimed
_UNKNOWN = object()
#: values copied at a run's start to compare with later: scalars, and small containers and
#: dataclasses of them (a data set read at init is not copied at every run's start)
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MAX_ITEMS = 1000
_CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)


def _part(value, field):
    """``value``'s ``field`` (None: the value itself), as ``cfg.field`` or ``cfg["field"]``."""
    if field is None:
        return value
    try:
        return value[field] if isinstance(value, Mapping) else getattr(value, field)
    except Exception:  # noqa: BLE001 — a part this value lacks: nothing to compare
        return _UNKNOWN


def _small(value, budget: list[int]) -> bool:
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if isinstance(value, _SCALARS):
        return True
    if type(value) in (tuple, list, set, frozenset):
        return all(_small(v, budget) for v in value)
    if type(value) is dict:
        return all(_small(k, budget) and _small(v, budget) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_small(getattr(value, f.name), budget) for f in dataclasses.fields(value))
    return False


def _copy(value):
    try:
        if value is _UNKNOWN or not _small(value, [_MAX_ITEMS]):
            return _UNKNOWN
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 — an unset or uncopyable dataclass field: not compared
        return _UNKNOWN


def _changed(before, now) -> bool:
    """True only where ``now`` provably differs from ``before`` (an ``==`` that gives no
    plain bool, or raises, proves nothing)."""
    if before is _UNKNOWN or now is _UNKNOWN or before is now:
        return False
    try:
        same = before == now
    except Exception:  # noqa: BLE001
        return False
    return type(same) is bool and not same


def _code_names(obj, seen: set) -> set[str]:
    """The global and attribute names a function's or a class's code uses (nested code too)."""
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        obj = obj.__func__
    names: set[str] = set()
    if isinstance(obj, property):
        for function in (obj.fget, obj.fset, obj.fdel):
            names |= _code_names(function, seen)
        return names
    if isinstance(obj, type):
        if obj not in seen and obj.__module__ != "builtins":
            seen.add(obj)
            for member in vars(obj).values():
                names |= _code_names(member, seen)
        return names
    code = getattr(obj, "__code__", None)
    stack = [code] if isinstance(code, types.CodeType) else []
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _notebook_code_names(fdg, namespace) -> set[str]:
    """The names used by the code of the functions and classes the cells read from the
    notebook: any of them may read a notebook value at any step (modules are not looked
    into)."""
    names: set[str] = set()
    seen: set = set()
    for name in fdg.notebook_names():
        value = namespace.get(name)
        if isinstance(value, (types.FunctionType, types.MethodType, type)):
            names |= _code_names(value, seen)
    return names


def _init_only_parts(fdg, name: str, code_names: set[str]) -> dict:
    """Part (a field, or None for the whole value) → the fragments whose init cells alone
    read it, for the notebook value ``name``; empty where that cannot be proved (``name``
    is among ``code_names``, :func:`_notebook_code_names`)."""
    if name in code_names:
        return {}
    only = init_only(fdg, name)
    parts: dict = dict(only.fields)
    if only.whole:
        parts[None] = only.whole
    return parts


def _init_values(fdg, namespace) -> dict:
    """(name, part) → a copy of each part of a notebook value only init cells read, as the
    run's first stretch gives it to them (see :func:`kept_init_values`)."""
    kept, code_names = {}, _notebook_code_names(fdg, namespace)
    for name in fdg.notebook_names():
        if name not in namespace or isinstance(namespace[name], _CODE):
            continue  # modules, functions, classes: code, not values (and reading a module's
            # attribute may import a submodule)
        for part in _init_only_parts(fdg, name, code_names):
            value = _copy(_part(namespace[name], part))
            if value is not _UNKNOWN:
                kept[(name, part)] = value
    return kept


#: what makes a run run init cells again, with the values as they are then: a replica
#: count that changed (a re-placement, policy auto's trials), replicas rebuilt after a lost
#: worker, or a value left out of a fragment's state (it does not pickle), which the init
#: cell builds again at every boundary before the kept values are laid over
_INIT_AGAIN = frozenset({"replaced", "re-placed", "worker lost", "state left out"})


def _init_cells_may_run_again(run, trainer) -> bool:
    return (
        getattr(run, "auto_table", None) is not None
        or getattr(trainer, "_pending", None) is not None
        or any(e.kind in _INIT_AGAIN for e in run.events)
    )


def init_only_changes(fdg, trainer, values: Mapping) -> list[tuple[str, tuple[str, ...]]]:
    """The parts of ``values`` (name → the value ``fdg.update`` sends) that differ from what
    the run's init cells were given, and that only init cells read: ``("cfg.hidden",
    ("learner",))`` each (the name alone when nothing else reads the value at all). Empty
    where that cannot be proved — a part a step or iteration cell mentions, a value used
    whole there, a value too big to copy, a run that has recorded no iteration yet (its
    init cells may still be about to take the new value), or one whose init cells may run
    again (:func:`_init_cells_may_run_again`).

    >>> from types import SimpleNamespace as Obj
    >>> import workbench as wb
    >>> fdg = wb.FDG(namespace={"cfg": Obj(hidden=64, lr=0.1)})
    >>> _ = fdg.add_fragment("learner", "net = [0.0] * cfg.hidden", rate="init")
    >>> _ = fdg.add_fragment("learner", "net = [w - cfg.lr for w in net]", rate="iteration")
    >>> kept = kept_init_values(fdg, fdg.namespace)   # as the run's first stretch keeps them
    >>> trainer = Obj(fdg=fdg, namespace=fdg.namespace, run_record=Obj(rows=[{}], events=[]), init_values=kept)
    >>> init_only_changes(fdg, trainer, {"cfg": Obj(hidden=128, lr=0.01)})
    [('cfg.hidden', ('learner',))]
    """
    kept, run = getattr(trainer, "init_values", None), trainer.run_record
    if not kept or run is None or not run.rows or _init_cells_may_run_again(run, trainer):
        return []
    out, code_names = [], _notebook_code_names(fdg, trainer.namespace)
    for name, value in values.items():
        parts = _init_only_parts(fdg, name, code_names)  # the cells as they are now
        changed = [
            (f"{name}.{part}", frags)
            for part, frags in parts.items()
            if part is not None and (name, part) in kept and _changed(kept[(name, part)], _part(value, part))
        ]
        if not changed and None in parts and (name, None) in kept and _changed(kept[(name, None)], value):
            changed = [(name, parts[None])]
        out += changed
    return sorted(out)


def init_only_notice(changes: list[tuple[str, tuple[str, ...]]]) -> str:
    """What an update's notice says of ``changes`` (from :func:`init_only_changes`).

    >>> init_only_notice([("cfg.hidden", ("learner",))])
    'cfg.hidden is read only by the init cell of learner, which does not run again in this run: it takes effect at the next run (re-running that cell now keeps what it built: the names it had keep their trained values).'
    """

    def cells(frags) -> str:
        return f"init cell{'s' if len(frags) > 1 else ''} of {', '.join(frags)}"

    if len(changes) == 1:
        ((label, frags),) = changes
        many = len(frags) > 1
        return (
            f"{label} is read only by the {cells(frags)}, which {'do' if many else 'does'} not run "
            f"again in this run: it takes effect at the next run (re-running {'those cells' if many else 'that cell'} "
            "now keeps what it built: the names it had keep their trained values)."
        )
    listed = ", ".join(f"{label} ({cells(frags)})" for label, frags in changes)
    return (
        f"{listed} are read only by init cells, which do not run again in this run: they take "
        "effect at the next run (re-running an init cell now keeps what it built: the names it "
        "had keep their trained values)."
    )
