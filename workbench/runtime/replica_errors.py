"""The errors a replica's cells get for what they read and write, each naming the cell,
the value and the way out: a value not bound on some path through a cell
(:meth:`CellErrors._unbound`), a step value whose shape changes between steps
(``_stack``), replicas of a producer that wrote values that cannot be joined
(``_disagree``), an input nobody has written yet (``_missing``).

They are a mixin of :class:`~workbench.runtime.replica.GroupReplica` (they read its
``index``, ``worker`` and ``program``), as is the error for a cell that raised (``_error``),
which drops the replica loop's own frame from the traceback: the user's code starts at the cell.

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
from workbench.runtime.cell_exit import describe as describe_error
from workbench.runtime.arrays import ReplicasDisagree, ReplicasMisfit, StepMismatch, UnbatchedDisagree, stack
from workbench.runtime.program import Binding

__all__ = ["CellErrors"]

#: the runtime's frame in a cell's traceback (the loop that exec'd the cell): not the user's
_REPLICA_FILE = str(Path(__file__).with_name("replica.py"))


class CellErrors:
    """Builders of a replica's cell errors (see the module docstring)."""

    def _cell_error(self, frag: str, rate: str, iteration, error: str) -> FragmentRuntimeError:
        """The error of a cell of this replica about what it reads or writes (no line of
        its own raised: no traceback)."""
        return FragmentRuntimeError(fragment=frag, rate=rate, replica=self.index, worker=self.worker, line=None,
                                    source_line=None, iteration=iteration, error=error, traceback_text="")

    def _unbound(self, frag, rate, name, reader, iteration) -> FragmentRuntimeError:
        readers = reader if reader == "other fragments" else repr(reader)
        return self._cell_error(
            frag, rate, iteration,
            f"the {rate} cell did not bind {name!r} this time, but {readers} read"
                  f"{'' if reader == 'other fragments' else 's'} it. Bind it on every path through "
                  "the cell.")

    def _stack(self, producer: str, name: str, values: list, iteration) -> Any:
        """The ``[T, …]`` stack of a step value; a step that wrote another shape or type is
        the producing step cell's error, named with the value and the steps."""
        try:
            return stack(values)
        except StepMismatch as exc:
            line = _line_writing(self.program.code.get((producer, "step"), ""), name)
            source = self.program.code[(producer, "step")].splitlines()[line - 1] if line else None
            raise FragmentRuntimeError(
                fragment=producer, rate="step", replica=self.index, worker=self.worker, line=line,
                source_line=source, iteration=iteration,
                error=f"{name!r}{f' (its part {exc.part})' if exc.part else ''} changes shape or type between steps: {exc}. "
                      f"Its {len(values)} per-step values are stacked into one [T, …] value for the "
                      "cells that read it once per iteration, so every step must write the same shape "
                      "and type: pad to a fixed size (np.zeros(MAX)), and write an empty or NaN array "
                      "rather than None.",
                traceback_text="",
            ) from None

    def _disagree(self, key: str, exc: ReplicasDisagree, items, frag: str | None = None,
                  rate: str | None = None, iteration=None) -> FragmentRuntimeError:
        """Replicas of a producer wrote different values that have no batch axis: the
        reading cell's error, naming the value, both fragments and the two ways out."""
        if frag is None:  # a task's input: blame the first of its cells that binds it
            frag, rate, iteration = next(
                ((f, item.rate, item.iteration) for item in items for f in item.fragments
                 for b in self.program.bindings.get((f, item.rate), ()) if b.key == key),
                (self.program.group, "iteration", None))
        producer, _, name = key.rpartition(":")[2].partition(".")  # "stacked:env.obs" → env, obs
        what = f"{name!r}{f' (its part {exc.part})' if exc.part else ''}"
        if isinstance(exc, UnbatchedDisagree):
            rule = (f"Each replica of {producer!r} steps one plain env (its reward is a number, "
                    f"one env's), so {name} has no batch axis: one replica's {name} is one env's, "
                    "and replicas' cannot be joined as more envs. Step a vector of envs in each "
                    "replica — wb.envs.make(env_id, num_envs=k) — so every step value has one row "
                    f"per env, or add the axis yourself ({name} = np.asarray({name})[None], reward "
                    "= np.asarray([reward])) (docs/boundaries.md).")
        elif isinstance(exc, ReplicasMisfit):
            rule = ("Arrays read from several replicas are joined along their batch axis, so "
                    "every other axis (and the kind: NumPy array or torch tensor) must be the "
                    f"same on every replica. Give {name} the same shape on each (pad to a fixed "
                    "size), or keep it inside the fragment (docs/boundaries.md).")
        else:
            rule = ("A value read from several replicas is joined along its batch axis "
                    "when it has one; one without (a number, a bool, None, a 0-d array) reaches "
                    "the reader only when every replica wrote the same, so that it means the "
                    "same under every placement. Give it a batch axis — one row per replica, "
                    f"{name} = np.array([{name}]) — to read every replica's, or compute it where "
                    "it is the same on every replica (docs/boundaries.md).")
        return self._cell_error(frag, rate, iteration, f"it reads {what} from the replicas of fragment "
                                f"{producer!r}, and they differ ({exc}). {rule}")

    def _no_envs(self, frag: str, iteration) -> FragmentRuntimeError:
        """An env fragment's step wrote an empty batch: the replica steps no envs, and the
        run would finish counting nothing."""
        return self._cell_error(
            frag, "step", iteration,
            "its step wrote an empty batch (its reward, or else the first array it writes, has 0 rows): "
            f"replica {self.index} of {self.count} has no envs to step. If each replica makes "
            "num_envs // replica.count envs, there are fewer envs than replicas: give at least "
            f"{self.count} envs, or place fewer replicas of {frag!r}.")

    def _error(self, frag: str, rate: str, exc: BaseException, iteration) -> FragmentRuntimeError:
        filename = f"<fragment {frag}:{rate}>"
        frames = traceback.extract_tb(exc.__traceback__)
        user = [f for f in frames if f.filename == filename]
        line = user[-1].lineno if user else None
        source = linecache.getline(filename, line) if line else None
        # drop the runtime's own frame: the user's code starts at the cell
        shown = frames[1:] if frames and frames[0].filename == _REPLICA_FILE else frames
        text = "".join(traceback.format_list(shown)) + "".join(
            traceback.format_exception_only(type(exc), exc))
        return FragmentRuntimeError(
            fragment=frag, rate=rate, replica=self.index, worker=self.worker, line=line,
            source_line=source, error=describe_error(exc), traceback_text=text, iteration=iteration,
            advice="Do what the error says; the cell itself may be fine." if isinstance(exc, WorkbenchError) else None)

    def _missing(self, frag, rate, b: Binding, iteration, why: str) -> FragmentRuntimeError:
        return self._cell_error(frag, rate, iteration, f"it reads {b.name!r} from fragment {b.producer!r}, "
                                f"which {why}. Give {b.name!r} a first value in {b.producer!r}'s --init cell.")


def _line_writing(code: str, name: str) -> int | None:
    """The last cell line that binds ``name`` (``name = …``, ``a, name = …``, ``name +=``),
    to point at the line whose per-step value is stacked; None if no line does."""
    import ast

    lines = [node.lineno for node in ast.walk(ast.parse(code))
             if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)]
    return max(lines) if lines else None
