"""What a resume from a checkpoint checks about init cells edited since it was written.

A checkpoint's manifest holds the FDG's cells. Restoring runs each fragment's init cell
and lays the saved values over what it built (:func:`~workbench.runtime.state.portable.restore_into`).
A value may legitimately be of another kind at the checkpoint than the init cell's first
value — the cells rebind it while the run goes (``best = None`` at init, a float later) —
so a kind mismatch alone refuses nothing. But where the init cell's statements that make
a name's first value *changed* since the checkpoint, a saved value of another kind than
the new first value is the old cell's value laid over the new cell's (``obs_scale = 1.0``
edited to ``obs_scale = np.ones(4)``: a float over an array), and the step cell would fail
later, far from the cause. So:

- :func:`edited_bindings` finds, per name the new init cell binds, whether the statements
  that make its first value (those binding it or changing it in place, and those binding
  what they read, transitively) differ from the checkpoint's cell — syntax, not text:
  comments, blank lines and moved statements do not count;
- :func:`mark_edited` marks those names in the checkpoint's fragment states
  (``EDITED_KEY``), as a resume starts;
- :func:`check_edited` runs where the new first value exists, on the replica, just after
  the init cell: a saved value of another kind (number, string, None, NumPy array, tensor,
  list, tuple, dict, …) than the new one is refused with the value, the cell line, both
  kinds and the ways out; a new first value of ``None`` takes anything (a placeholder the
  cells rebind). Shapes are checked for every name as before (every axis but the first);
- :func:`replaced_notes` says, once per edited name, where the checkpoint's value replaces
  another one the edited cell built — a resume lays the saved values over what the init
  cells build, so an edit that changes a value the checkpoint holds (another dtype, a first
  axis of another size, another number, another optimiser learning rate) is not what runs:
  each note names the value, the fragment and cell line, what the edited cell built and
  what the checkpoint restores, and the ways out.

Example:
    >>> sorted(edited_bindings("n = 8\\nscale = 1.0\\nenvs = make(n)",
    ...                        "n = 4  # fewer\\nscale = 1.0\\nenvs = make(n)"))
    ['envs', 'n']
    >>> import numpy as np
    >>> mark = {"fragment": "env", "names": {"scale": {"line": 1, "now": "scale = np.ones(4)", "was": "scale = 1.0"}}}
    >>> check_edited("scale", 1.0, np.ones(4), mark)
    Traceback (most recent call last):
    ...
    ValueError: 'scale' does not fit what the edited init cell builds now: the checkpoint holds a float (1.0), the init cell a float64 array of shape (4,). ...
    >>> mark = {"fragment": "learner", "names": {"lr": {"line": 1, "now": "lr = 1e-4", "was": "lr = 3e-4"}}}
    >>> note, = replaced_notes({"lr": 1e-4}, {"lr": 3e-4}, mark)
    >>> print(note.split(". A resume")[0])
    fragment 'learner' resumes 'lr' from the checkpoint, not as its edited init cell builds it (line 1: `lr = 1e-4`, which was `lr = 3e-4`): the edited cell builds a float (0.0001), the checkpoint restores a float (0.0003)
"""

from __future__ import annotations

import ast
import random
from typing import Any

import numpy as np

from workbench.fdg.analysis import analyse_code

__all__ = ["EDITED_KEY", "MISSING", "edited_bindings", "mark_edited", "check_edited", "replaced_notes"]

#: a checkpoint's fragment state: the names whose init binding changed since it was written
#: ({"fragment": F, "names": {name: {"line", "now", "was"}}}); read by restore_into, never saved
EDITED_KEY = "_wb_edited_init"

#: the init cell did not bind the name this time: nothing to compare with
MISSING = object()


def edited_bindings(old: str | None, new: str) -> dict[str, dict]:
    """The names ``new`` binds whose first value is made by other statements than in
    ``old`` (None: the checkpoint's fragment had no init cell), each with the first
    statement of ``new`` that differs (``line``, ``now``: its first line) and what ``old``
    had in its place (``was``; None where it is new)."""
    now = _statements(new)
    if now is None:  # the FDG checked the cell already; nothing to compare
        return {}
    was = _statements(old) if old is not None else None
    out = {}
    everything_then = {ast.dump(stmt) for stmt, _ in was or ()}
    for name in dict.fromkeys(n for _, found in now for n in found.writes):
        made_now = [now[i] for i in _making(now, name)]
        made_then = [was[i] for i in _making(was, name)] if was is not None else []
        if was is not None and [ast.dump(s) for s, _ in made_now] == [ast.dump(s) for s, _ in made_then]:
            continue
        # the edit to point at: the first statement making it that the old cell lacks
        stmt, found = next(((s, f) for s, f in made_now if ast.dump(s) not in everything_then), (None, None))
        if stmt is None:  # the old cell's statements, combined anew, or one of them gone
            stmt = next(s for s, f in reversed(made_now) if name in f.writes)
            gone = next((s for s, _ in made_then if ast.dump(s) not in {ast.dump(t) for t, _ in made_now}), None)
        else:
            gone = next((s for s, f in reversed(was or ()) if set(f.writes) & set(found.writes)), None)
        out[name] = {
            "line": stmt.lineno,
            "now": _first_line(stmt),
            "was": _first_line(gone) if gone is not None else None,
        }
    return out


def mark_edited(cells: list[dict], fdg, state) -> None:
    """Mark, in ``state`` (a checkpoint's), the saved names whose init binding in ``fdg``
    differs from the checkpoint's ``cells``; clear marks of an earlier call (the same
    loaded checkpoint resumed by another FDG)."""
    old = {c["fragment"]: c["code"] for c in cells if c.get("rate") == "init"}
    for frag, replicas in state.fragments.items():
        fragment = fdg.fragments.get(frag)
        cell = fragment.cells.get("init") if fragment is not None else None
        edited = {} if cell is None or old.get(frag) == cell.code else edited_bindings(old.get(frag), cell.code)
        for values in replicas:
            if not isinstance(values, dict):
                continue
            names = {n: info for n, info in edited.items() if n in values}
            if names:
                values[EDITED_KEY] = {"fragment": frag, "names": names}
            else:
                values.pop(EDITED_KEY, None)


def check_edited(name: str, enc: Any, current: Any, mark: dict) -> None:
    """Raise ValueError when the saved ``enc`` (encoded) of ``name``, whose init binding
    changed (``mark``: :data:`EDITED_KEY`'s value), is not of the kind of ``current``, the
    edited cell's first value (recursing into dicts, lists, tuples and objects saved by
    attributes)."""
    for path, saved, live in _pairs(name, enc, current):
        kind, now = _saved_kind(saved), _live_kind(live)
        if kind is not None and now is not None and kind != now:
            raise ValueError(_refusal(path, name, saved, live, mark))


def replaced_notes(built: dict[str, Any], saved: dict[str, Any], mark: dict) -> list[str]:
    """What to say about the edited names (``mark``: :data:`EDITED_KEY`'s value) whose saved
    value (``saved``: name → encoded) differs from what the edited init cell built now
    (``built``: name → value, before anything is laid over it): one note per name, naming
    the fragment, the cell line, what the cell built and what the checkpoint restores in its
    place. A name the cell did not bind (:data:`MISSING`), or built as saved, is not said."""
    notes = []
    for name in mark.get("names", {}):
        if name in saved and built.get(name, MISSING) is not MISSING:
            differences = _differences(name, saved[name], built[name])
            if differences:
                notes.append(_replaced_note(name, differences, mark))
    return notes


# -- which statements make a name's first value ---------------------------------------
def _statements(code: str | None) -> list[tuple[ast.stmt, Any]] | None:
    """The cell's top-level statements, each with what it reads and binds (None: no parse)."""
    try:
        lines = code.splitlines()
        out = []
        for stmt in ast.parse(code).body:
            stmt.source_line = lines[stmt.lineno - 1].strip()  # as written: `3e-4`, not 0.0003
            out.append((stmt, analyse_code(ast.unparse(stmt))))
        return out
    except Exception:  # noqa: BLE001 — a cell that does not parse compares as changed
        return None


def _making(statements, name: str) -> list[int]:
    """Indices of the statements that make ``name``'s first value: those that bind it or
    change it in place, and, transitively, those that bind the names they read."""
    picked, todo, seen = set(), [name], set()
    while todo:
        wanted = todo.pop()
        if wanted in seen:
            continue
        seen.add(wanted)
        for i, (stmt, found) in enumerate(statements):
            # in place only for the name itself: `y = x + 1` reads x but makes y
            makes = wanted in found.writes or (wanted == name and _changes_in_place(stmt, found, name))
            if makes and i not in picked:
                picked.add(i)
                todo.extend(found.inputs)
    return sorted(picked)


def _changes_in_place(stmt: ast.stmt, found, name: str) -> bool:
    """``buf.fill(0)``, ``buf[0] = 1``, ``cfg.lr = 3e-4`` (at any depth: in a loop too)."""
    if name not in found.inputs:
        return False
    if not found.writes:  # an expression statement or a mutation: it binds nothing
        return True
    return any(
        isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store) and _base(node) == name
        for node in ast.walk(stmt)
    )


def _base(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _first_line(stmt: ast.stmt) -> str:
    return getattr(stmt, "source_line", None) or ast.unparse(stmt).splitlines()[0]


# -- kinds ------------------------------------------------------------------------------
#: an encoded value's kind; modules, optimisers, state_dicts and objects have checks of their own
_ENCODED = {
    "ndarray": "array",
    "cupy": "array",
    "tensor": "tensor",
    "list": "list",
    "tuple": "tuple",
    "dict": "dict",
    "np_generator": "generator",
    "random": "random",
    "object": None,
}


def _plain_kind(value: Any) -> str | None:
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float)):
        return "number"
    return "string" if isinstance(value, str) else "bytes" if isinstance(value, bytes) else None


def _saved_kind(enc: Any) -> str | None:
    if isinstance(enc, dict):
        return _ENCODED.get(enc.get("__kind__"))  # a plain dict is a state_dict's: not here
    return _plain_kind(enc)


def _live_kind(value: Any) -> str | None:
    if value is MISSING or value is None:  # not built, or a placeholder the cells rebind
        return None
    plain = _plain_kind(value)
    if plain is not None:
        return plain
    if isinstance(value, np.generic):
        return "number" if value.dtype.kind in "biuf" else "other"
    module = type(value).__module__
    if isinstance(value, np.ndarray) or (module.startswith("cupy") and hasattr(value, "shape")):
        return "array"
    if module.startswith("torch") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return "tensor"
    for kind, cls in (
        ("list", list),
        ("tuple", tuple),
        ("dict", dict),
        ("generator", np.random.Generator),
        ("random", random.Random),
    ):
        if isinstance(value, cls):
            return kind
    return "other"


def _pairs(path: str, enc: Any, live: Any):
    """(path, saved, live) for the value and, where both are containers of one kind (or a
    saved object and the one the cell built), for each part they share."""
    yield path, enc, live
    kind = enc.get("__kind__") if isinstance(enc, dict) else None
    if kind == "dict" and isinstance(live, dict):
        for key, value in enc["value"]:
            if key in live:
                yield from _pairs(f"{path}[{key!r}]", value, live[key])
    elif kind in ("list", "tuple") and isinstance(live, (list, tuple)) and len(live) == len(enc["value"]):
        for i, (value, now) in enumerate(zip(enc["value"], live)):
            yield from _pairs(f"{path}[{i}]", value, now)
    elif kind == "object":
        for attr, value in enc["value"]:
            yield from _pairs(f"{path}.{attr}", value, getattr(live, attr, MISSING))


def _describe_saved(enc: Any) -> str:
    kind = _saved_kind(enc)
    if kind in ("array", "tensor"):
        dtype = np.dtype(enc["dtype"]).name if enc.get("dtype") else str(enc["value"].dtype).replace("torch.", "")
        return f"a {dtype} {kind} of shape {tuple(enc['value'].shape)}"
    if kind in ("list", "tuple", "dict"):
        return f"a {kind} of {len(enc['value'])} item{'s' if len(enc['value']) != 1 else ''}"
    return _describe_plain(enc, kind)


def _describe_live(value: Any) -> str:
    kind = _live_kind(value)
    if kind in ("array", "tensor"):
        dtype = str(value.dtype).replace("torch.", "")
        return f"a {dtype} {kind} of shape {tuple(value.shape)}"
    if kind in ("list", "tuple", "dict"):
        return f"a {kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    if kind == "other":
        cls = type(value)
        return f"a {cls.__module__}.{cls.__qualname__}"
    return _describe_plain(value, kind)


def _describe_plain(value: Any, kind: str | None) -> str:
    if kind == "None":
        return "None"
    if kind == "generator":
        return "a NumPy random Generator"
    if kind == "random":
        return "a random.Random"
    shown = repr(value if not isinstance(value, np.generic) else value.item())
    noun = type(value).__name__
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun} ({shown if len(shown) <= 40 else shown[:37] + '...'})"


# -- what is said -----------------------------------------------------------------------
def _label(path: str) -> str:
    return repr(path) if path.isidentifier() else path


def _where(info: dict) -> str:
    """The edit that changed how a name is made: ``line 2: `x = 4`, which was `x = 8```."""
    was = f", which was `{info['was']}`" if info.get("was") else ", new since the checkpoint"
    return f"line {info['line']}: `{info['now']}`{was}"


def _refusal(path: str, name: str, saved: Any, live: Any, mark: dict) -> str:
    frag, info = mark["fragment"], mark["names"][name]
    return (
        f"{_label(path)} does not fit what the edited init cell builds now: the checkpoint holds "
        f"{_describe_saved(saved)}, the init cell {_describe_live(live)}. The init cell of fragment "
        f"{frag!r} makes {name!r} another way since the checkpoint was written ({_where(info)}), so "
        "the saved value would replace the new one. Nothing was changed: the checkpoint and the "
        "FDG are as they were. Either resume with the cell as it was (wb.FDG.from_checkpoint(DIR) "
        f"rebuilds the cells the checkpoint came from), or keep the new {name!r} and resume "
        f"everything else (ckpt = load_checkpoint(DIR); ckpt.leave_out({frag!r}, {name!r}); "
        "fdg.run(resume=ckpt, …)), or start a new run."
    )


def _replaced_note(name: str, differences: list[tuple[str, str, str]], mark: dict) -> str:
    frag, info = mark["fragment"], mark["names"][name]
    if len(differences) == 1 and differences[0][0] == name:
        what = f"the edited cell builds {differences[0][1]}, the checkpoint restores {differences[0][2]}"
    else:
        shown = [
            f"{_label(path)}: the edited cell builds {built}, the checkpoint restores {restored}"
            for path, built, restored in differences[:_SHOWN]
        ]
        more = len(differences) - _SHOWN
        what = "; ".join(shown) + (f"; and {more} more part{'s' if more != 1 else ''}" if more > 0 else "")
    return (
        f"fragment {frag!r} resumes {name!r} from the checkpoint, not as its edited init cell builds it "
        f"({_where(info)}): {what}. A resume lays the checkpoint's values over what the init cells "
        f"build (docs/reliability.md), so the run goes on with the checkpoint's {name!r}. To use the "
        f"edited value, start a fresh run (without resume= / --resume), or leave {name!r} out of the "
        f"resume (ckpt = load_checkpoint(DIR); ckpt.leave_out({frag!r}, {name!r}); "
        "fdg.run(resume=ckpt, …)); to resume as the checkpoint was written, undo the edit "
        "(wb.FDG.from_checkpoint(DIR) rebuilds its cells)."
    )


# -- what the checkpoint replaces -------------------------------------------------------
#: the differences a note lists, of one value (a network's weights are many)
_SHOWN = 4


def _differences(path: str, enc: Any, live: Any) -> list[tuple[str, str, str]]:
    """(path, what the cell built, what the checkpoint restores) for each part of the
    saved ``enc`` (encoded) that differs from ``live``; empty where it is the same value."""
    if live is MISSING:
        return [(path, "nothing", _restored(enc))]
    encoded = enc.get("__kind__") if isinstance(enc, dict) else None
    if encoded in ("module", "optimizer", "stateful"):  # its state loads into what the cell built
        state = _state_of(live)
        if state is None:
            return [(path, _built(live), f"the saved state of a {encoded}")]
        return _differences(f"{path}.state_dict()", enc["value"], state)
    if encoded == "object":
        cls = type(live)
        if f"{cls.__module__}.{cls.__qualname__}" != enc["class"]:  # restoring refuses it
            return [(path, _built(live), f"a {enc['class']}")]
        return [
            d
            for attr, value in enc["value"]
            for d in _differences(f"{path}.{attr}", value, getattr(live, attr, MISSING))
        ]
    kind, now = _saved_kind(enc), _live_kind(live)
    if kind is None:  # a bare state_dict's dict: nothing to compare it by
        return []
    if kind != now:  # a placeholder (None) the checkpoint fills
        return [(path, _built(live), _restored(enc))]
    if kind in ("list", "tuple"):
        if len(enc["value"]) != len(live):
            return [(path, _built(live), _restored(enc))]
        return [
            d
            for i, (value, item) in enumerate(zip(enc["value"], live))
            for d in _differences(f"{path}[{i}]", value, item)
        ]
    if kind == "dict":
        keys = [key for key, _ in enc["value"]]
        out = [] if set(keys) == set(live) else [(path, _keys(list(live)), _keys(keys))]
        return out + [
            d for key, value in enc["value"] if key in live for d in _differences(f"{path}[{key!r}]", value, live[key])
        ]
    built, restored = _built(live), _restored(enc)
    if built != restored:
        return [(path, built, restored)]
    if _same(kind, enc, live):
        return []
    return [
        (path, built, restored + (" in another state" if kind in ("generator", "random") else " with other values"))
    ]


def _state_of(value: Any) -> Any:
    try:
        return value.state_dict()
    except Exception:  # noqa: BLE001 — loading its saved state will say what is wrong
        return None


def _same(kind: str, enc: Any, live: Any) -> bool:
    """Whether the saved ``enc`` and ``live``, of one kind and description, are equal."""
    if kind == "array":
        saved = enc["value"].numpy().astype(np.dtype(enc["dtype"]), copy=False)
        now = live.get() if hasattr(live, "get") and not isinstance(live, np.ndarray) else live
        return saved.shape == now.shape and bool(np.array_equal(saved, now, equal_nan=saved.dtype.kind == "f"))
    if kind == "tensor":
        return bool((enc["value"] == live.detach().to("cpu")).all())  # one dtype and shape: said alike
    if kind == "generator":
        return enc["value"] == live.bit_generator.state
    if kind == "random":
        return _plain(enc["value"]) == live.getstate()
    return enc == live


def _plain(enc: Any) -> Any:
    """An encoded value of plain parts (a ``random.Random``'s state) as it was."""
    kind = enc.get("__kind__") if isinstance(enc, dict) else None
    if kind in ("list", "tuple"):
        items = [_plain(v) for v in enc["value"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _plain(v) for k, v in enc["value"]}
    return enc


def _built(value: Any) -> str:
    return "None" if value is None else _describe_live(value)


def _restored(enc: Any) -> str:
    if isinstance(enc, dict) and enc.get("__kind__") in ("module", "optimizer", "stateful", "object"):
        return f"the saved state of a {enc.get('class', enc['__kind__'])}"
    if isinstance(enc, dict) and "__kind__" not in enc:
        return "a saved state_dict"
    return _describe_saved(enc)


def _keys(keys: list) -> str:
    shown = ", ".join(repr(k) for k in keys[:5]) + (", …" if len(keys) > 5 else "")
    return f"a dict with keys {shown}" if keys else "an empty dict"
