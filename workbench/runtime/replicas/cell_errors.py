"""The errors a replica's cells get for what they read and write, each naming the cell,
the value and the way out: a value not bound on some path through a cell
(:meth:`CellErrors._unbound`), a step value whose shape changes between steps
(``_stack``), replicas of a producer that wrote values that cannot be joined
(``_disagree``), an input nobody has written yet (``_missing``).

They are a mixin of :class:`~workbench.runtime.replicas.replica.GroupReplica` (they read its
``index``, ``worker`` and ``program``), as is the error for a cell that raised (``_error``),
which drops the replica loop's own frame from the traceback: the user's code starts at the cell,
and names the script or notebook cell of code sent to a worker by value (:func:`_named_frames`).

Example:
    >>> _line_writing("a = 1\\nb, c = 2, 3\\nc += 1", "c")
    3
"""

from __future__ import annotations

import linecache
import traceback
from pathlib import Path
from typing import Any

from workbench.errors import FragmentRuntimeError, WorkbenchError
from workbench.runtime.process.cell_exit import describe as describe_error
from workbench.runtime.values.arrays import ReplicasDisagree, ReplicasMisfit, StepMismatch, UnbatchedDisagree, stack
from workbench.runtime.replicas.program import Binding

__all__ = ["CellErrors"]

#: the runtime's frame in a cell's traceback (the loop that exec'd the cell): not the user's
_REPLICA_FILE = str(Path(__file__).with_name("replica.py"))


class CellErrors:
    """Builders of a replica's cell errors (see the module docstring)."""

    def _cell_error(self, frag: str, rate: str, iteration, error: str) -> FragmentRuntimeError:
        """The error of a cell of this replica about what it reads or writes (no line of
        its own raised: no traceback)."""
        return FragmentRuntimeError(
            fragment=frag,
            rate=rate,
            replica=self.index,
            worker=self.worker,
            line=None,
            source_line=None,
            iteration=iteration,
            error=error,
            traceback_text="",
        )

    def _unbound(self, frag, rate, name, reader, iteration) -> FragmentRuntimeError:
        readers = reader if reader == "other fragments" else repr(reader)
        return self._cell_error(
            frag,
            rate,
            iteration,
            f"the {rate} cell did not bind {name!r} this time, but {readers} read"
            f"{'' if reader == 'other fragments' else 's'} it. Bind it on every path through "
            "the cell.",
        )

    def _stack(self, producer: str, name: str, values: list, iteration) -> Any:
        """The ``[T, …]`` stack of a step value; a step that wrote another shape or type is
        the producing step cell's error, named with the value and the steps."""
        try:
            return stack(values)
        except StepMismatch as exc:
            line = _line_writing(self.program.code.get((producer, "step"), ""), name)
            source = self.program.code[(producer, "step")].splitlines()[line - 1] if line else None
            raise FragmentRuntimeError(
                fragment=producer,
                rate="step",
                replica=self.index,
                worker=self.worker,
                line=line,
                source_line=source,
                iteration=iteration,
                error=f"{name!r}{f' (its part {exc.part})' if exc.part else ''} changes shape or type between steps: {exc}. "
                f"Its {len(values)} per-step values are stacked into one [T, …] value for the "
                "cells that read it once per iteration, so every step must write the same shape "
                "and type: pad to a fixed size (np.zeros(MAX)), and write an empty or NaN array "
                "rather than None.",
                traceback_text="",
            ) from None

    def _disagree(
        self, key: str, exc: ReplicasDisagree, items, frag: str | None = None, rate: str | None = None, iteration=None
    ) -> FragmentRuntimeError:
        """Replicas of a producer wrote different values that have no batch axis: the
        reading cell's error, naming the value, both fragments and the two ways out."""
        if frag is None:  # a task's input: blame the first of its cells that binds it
            frag, rate, iteration = next(
                (
                    (f, item.rate, item.iteration)
                    for item in items
                    for f in item.fragments
                    for b in self.program.bindings.get((f, item.rate), ())
                    if b.key == key
                ),
                (self.program.group, "iteration", None),
            )
        producer, _, name = key.rpartition(":")[2].partition(".")  # "stacked:env.obs" → env, obs
        what = f"{name!r}{f' (its part {exc.part})' if exc.part else ''}"
        if isinstance(exc, UnbatchedDisagree):
            rule = (
                f"Each replica of {producer!r} steps one plain env (its reward is a number, "
                f"one env's), so {name} has no batch axis: one replica's {name} is one env's, "
                "and replicas' cannot be joined as more envs. Step a vector of envs in each "
                "replica — wb.envs.make(env_id, num_envs=k) — so every step value has one row "
                f"per env, or add the axis yourself ({name} = np.asarray({name})[None], reward "
                "= np.asarray([reward])) (docs/boundaries.md)."
            )
        elif isinstance(exc, ReplicasMisfit):
            rule = (
                "Arrays read from several replicas are joined along their batch axis, so "
                "every other axis (and the kind: NumPy array or torch tensor) must be the "
                f"same on every replica. Give {name} the same shape on each (pad to a fixed "
                "size), or keep it inside the fragment (docs/boundaries.md)."
            )
        else:
            rule = (
                "A value read from several replicas is joined along its batch axis "
                "when it has one; one without (a number, a bool, None, a 0-d array) reaches "
                "the reader only when every replica wrote the same, so that it means the "
                "same under every placement. Give it a batch axis — one row per replica, "
                f"{name} = np.array([{name}]) — to read every replica's, or compute it where "
                "it is the same on every replica (docs/boundaries.md)."
            )
        return self._cell_error(
            frag,
            rate,
            iteration,
            f"it reads {what} from the replicas of fragment {producer!r}, and they differ ({exc}). {rule}",
        )

    def _no_envs(self, frag: str, iteration) -> FragmentRuntimeError:
        """An env fragment's step wrote an empty batch: the replica steps no envs, and the
        run would finish counting nothing."""
        return self._cell_error(
            frag,
            "step",
            iteration,
            "its step wrote an empty batch (its reward, or else the first array it writes, has 0 rows): "
            f"replica {self.index} of {self.count} has no envs to step. If each replica makes "
            "num_envs // replica.count envs, there are fewer envs than replicas: give at least "
            f"{self.count} envs, or place fewer replicas of {frag!r}.",
        )

    def _error(self, frag: str, rate: str, exc: BaseException, iteration) -> FragmentRuntimeError:
        filename = f"<fragment {frag}:{rate}>"
        frames = _named_frames(exc.__traceback__, self.program.code)
        user = [f for f in frames if f.filename == filename]
        line = user[-1].lineno if user else None
        source = linecache.getline(filename, line) if line else None
        # drop the runtime's own frame: the user's code starts at the cell
        shown = frames[1:] if frames and frames[0].filename == _REPLICA_FILE else frames
        text = "".join(traceback.format_list(shown)) + "".join(traceback.format_exception_only(type(exc), exc))
        return FragmentRuntimeError(
            fragment=frag,
            rate=rate,
            replica=self.index,
            worker=self.worker,
            line=line,
            source_line=source,
            error=describe_error(exc),
            traceback_text=text,
            iteration=iteration,
            advice="Do what the error says; the cell itself may be fine." if isinstance(exc, WorkbenchError) else None,
        )

    def _missing(self, frag, rate, b: Binding, iteration, why: str) -> FragmentRuntimeError:
        return self._cell_error(
            frag,
            rate,
            iteration,
            f"it reads {b.name!r} from fragment {b.producer!r}, "
            f"which {why}. Give {b.name!r} a first value in {b.producer!r}'s --init cell.",
        )


#: the file cloudpickle names for the code of every function and class it rebuilds from
#: their bytes — a notebook's or a script's (``__main__``), sent to a worker by value: the
#: frame keeps its lines and names, but not its file
_REBUILT = "<dynamic-code>"


def _named_frames(tb, cells: dict[tuple[str, str], str] | None = None) -> traceback.StackSummary:
    """The traceback's frames, each naming the file or cell the user wrote its code in.

    cloudpickle keeps, of the globals a function was defined with, ``__file__``: a
    script's frames name the script (and show its line, where the worker can read the
    file). Code from a notebook cell has no file of its own on the worker (the kernel's
    name for the cell is not sent): its frames name the cell by what it defines, with the
    line in that cell. A class or function one of ``cells`` (this replica's fragment
    cells: (fragment, rate) → source) defines, rebuilt from a state sent by value, names
    that cell, as the cell's own frames do.

    >>> ns = {"__file__": "/home/me/train.py"}
    >>> exec(compile("class Env:\\n    def step(self):\\n        raise ValueError", _REBUILT, "exec"), ns)
    >>> def last_frame(ns):
    ...     try:
    ...         ns["Env"]().step()
    ...     except ValueError as exc:
    ...         frame = _named_frames(exc.__traceback__)[-1]
    ...         return frame.filename, frame.lineno, frame.name
    >>> last_frame(ns)
    ('/home/me/train.py', 3, 'step')
    >>> del ns["__file__"]  # a notebook's: no file
    >>> last_frame(ns)
    ('<notebook cell defining Env>', 3, 'step')
    """
    frames = traceback.extract_tb(tb)
    for i, (frame, _) in enumerate(traceback.walk_tb(tb)):
        if frames[i].filename == _REBUILT:
            old = frames[i]
            frames[i] = traceback.FrameSummary(
                _written_in(frame, cells or {}),
                old.lineno,
                old.name,
                end_lineno=old.end_lineno,
                colno=old.colno,
                end_colno=old.end_colno,
            )
    return frames


def _written_in(frame, cells: dict[tuple[str, str], str]) -> str:
    """Where the code of a frame cloudpickle rebuilt was written: its script, the fragment
    cell or else the notebook cell that defines its outermost class or function."""
    script = frame.f_globals.get("__file__")
    if isinstance(script, str) and script:
        return script
    outer = frame.f_code.co_qualname.split(".")[0]
    if not outer.isidentifier():  # a lambda or a comprehension at a cell's top level
        return "<a notebook cell>"
    for (frag, rate), code in cells.items():
        if outer in _defines(code):
            return f"<fragment {frag}:{rate}>"  # the replica registered its lines (linecache)
    return f"<notebook cell defining {outer}>"


def _defines(code: str) -> set[str]:
    """The classes and functions a cell defines at its top level."""
    import ast

    try:
        body = ast.parse(code).body
    except SyntaxError:
        return set()
    return {node.name for node in body if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}


def _line_writing(code: str, name: str) -> int | None:
    """The last cell line that binds ``name`` (``name = …``, ``a, name = …``, ``name +=``),
    to point at the line whose per-step value is stacked; None if no line does."""
    import ast

    lines = [
        node.lineno
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
    ]
    return max(lines) if lines else None
