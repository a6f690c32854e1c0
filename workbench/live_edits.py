"""What an edit made while a run trains does at the boundary it lands at
(docs/live_changes.md), under inline and every cluster policy alike.

- The changes asked for since the last stretch was planned are noted where the next one
  starts (:func:`take_changes`), together with the FDG it plans from, so the iteration
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

Example:
    >>> from workbench.fdg.fragment import Fragment
    >>> old = Fragment("env").with_cell("init", "envs = make()\\nobs = envs.reset()")
    >>> new = old.with_cell("init", "envs = make()\\nobs = envs.reset()\\nmarker = 7.0")
    >>> init_edit_notice(old, new)
    'it runs there in each replica of env to give marker a first value; envs, obs keep their trained values'
"""
from __future__ import annotations

from workbench.runtime.counting import REBUILT_KEY, RESERVED

__all__ = ["take_changes", "say_unapplied", "with_new_init_names", "init_edit_notice", "NEW_IN_INIT"]

#: the label a name the edited init cell adds gets among the names its replicas build again
NEW_IN_INIT = "new in the edited init cell"


def take_changes(run, trainer, start: int) -> None:
    """Note every change ``trainer`` holds as applying from ``start``, the iteration the
    stretch being planned begins with, and forget them (call with ``trainer.lock`` held,
    while taking the FDG the stretch runs)."""
    changes, trainer._changes = trainer._changes, []
    for kind, what in changes:
        run.note(kind, f"{what}: applies from iteration {start}", start)


def say_unapplied(run, trainer) -> None:
    """Changes (and a re-placement) ``trainer`` still holds once the run has ended (its last
    iteration, solved, stopped) at the boundary they waited for: said, not dropped quietly
    (call with ``trainer.lock`` held)."""
    asked = [what for _, what in trainer._changes]
    if trainer._pending is not None:
        asked.append(f"re-placement under {getattr(trainer._pending, 'name', trainer._pending)}")
    trainer._changes, trainer._pending = [], None
    if not asked:
        return
    why = ("it finished its iterations" if run.completed_iterations >= run.iterations
           else "it was solved" if run.is_solved() else "it was stopped")
    run.note("not applied", f"{'; '.join(asked)}: not applied, the run ended first "
             f"({why} at iteration {run.completed_iterations})", run.completed_iterations)


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
    return (f"it adds no name, so it changes nothing in this run{kept_text}. It is the init cell of "
            "the next run; to change a value now, assign it in an iteration cell, or pass it with "
            "%fdg update / fdg.update")
