"""Fragments: named pieces of a training loop, with code per rate.

A fragment has up to three cells, one per *rate*:

- ``init``: once per replica when the fragment is deployed (build envs, networks…);
- ``iteration``: once per training iteration (learn, sync weights…);
- ``step``: once per environment step, ``T`` times per iteration (act, step envs…).

All cells of one fragment share one namespace per replica, so an init cell's ``envs`` is
there for the step cell.

Example:
    >>> actor = Fragment("actor").with_cell("step", "action = policy(obs)")
    >>> actor.summary()
    'actor: reads policy, obs → writes action · every step'
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field, replace

from workbench.fdg.analysis import analyse_code
from workbench.fdg.errors import FragmentOptionError
from workbench.fdg.vocabulary import DEVICE_KINDS, RATES, whole_number

__all__ = ["RATES", "RUNTIME_NAMES", "Cell", "Fragment", "DEVICES", "default_rate"]

#: Devices a fragment may ask for; the policy maps them to a worker's CPU or GPU.
DEVICES = DEVICE_KINDS

#: Names the runtime puts in every replica's namespace (never FDG edges).
RUNTIME_NAMES = frozenset({"replica"})

# Role names whose cells usually run once per iteration; every other fragment's cells
# default to once per step. Shown in the summary line so the default is never hidden.
_ITERATION_ROLES = frozenset({"learner", "trainer", "optimizer"})


def default_rate(fragment_name: str) -> str:
    """The rate a cell gets when the magic is given neither ``--init`` nor ``--every``."""
    return "iteration" if fragment_name in _ITERATION_ROLES else "step"


@dataclass(frozen=True)
class Cell:
    """One rate of a fragment: its source and what it reads and writes.

    ``inputs`` are the names the code reads before binding them (plus ``--reads``);
    ``writes`` the names it binds (plus ``--writes``).
    """

    rate: str
    code: str
    inputs: tuple[str, ...]
    writes: tuple[str, ...]
    declared_reads: tuple[str, ...] = ()
    declared_writes: tuple[str, ...] = ()

    @classmethod
    def from_code(
        cls,
        fragment: str,
        rate: str,
        code: str,
        *,
        reads: tuple[str, ...] = (),
        writes: tuple[str, ...] = (),
    ) -> "Cell":
        _check_rate(fragment, rate)
        # checked here, at the edge: a non-string would otherwise fail deep in ``compile``
        if not isinstance(code, str):
            raise FragmentOptionError(
                f"fragment {fragment!r}: the cell's code must be a string of Python source, got "
                f"{type(code).__name__} {code!r:.40}.",
                fragment=fragment,
            )
        for name in (*reads, *writes):
            _check_identifier(fragment, name)
        found = analyse_code(code, fragment=fragment)
        inputs = [n for n in found.inputs if n not in RUNTIME_NAMES]
        return cls(
            rate=rate,
            code=code,
            inputs=tuple(dict.fromkeys([*inputs, *reads])),
            writes=tuple(dict.fromkeys([*found.writes, *writes])),
            declared_reads=tuple(reads),
            declared_writes=tuple(writes),
        )

    def line_of(self, name: str) -> int | None:
        """The first cell line that mentions ``name`` (for error messages)."""
        for number, text in enumerate(self.code.splitlines(), start=1):
            if _mentions(text, name):
                return number
        return None


@dataclass(frozen=True)
class Fragment:
    """A named fragment: cells per rate plus replica and device hints.

    ``replicas`` and ``device`` are the fragment's own wishes; a distribution policy may
    override the replica count and decides the concrete device.
    """

    name: str
    cells: dict[str, Cell] = field(default_factory=dict)
    replicas: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        _check_identifier(self.name, self.name, what="fragment name")
        if self.replicas is not None and (whole_number(self.replicas) is None or self.replicas < 1):
            raise FragmentOptionError(
                f"fragment {self.name!r}: --replicas must be a whole number ≥ 1, got {self.replicas!r}.",
                fragment=self.name,
            )
        if self.replicas is not None:
            object.__setattr__(self, "replicas", whole_number(self.replicas))  # NumPy's 2 as 2
        if self.device not in DEVICES:
            raise FragmentOptionError(
                f"fragment {self.name!r}: --device must be one of {', '.join(DEVICES)}, got {self.device!r}.",
                fragment=self.name,
            )

    def with_cell(
        self,
        rate: str,
        code: str,
        *,
        reads: tuple[str, ...] = (),
        writes: tuple[str, ...] = (),
    ) -> "Fragment":
        """A copy with the cell for ``rate`` added or replaced (re-running a cell)."""
        cell = Cell.from_code(self.name, rate, code, reads=tuple(reads), writes=tuple(writes))
        return replace(self, cells={**self.cells, rate: cell})

    @property
    def writes(self) -> tuple[str, ...]:
        """Every name any of the fragment's cells binds."""
        return tuple(dict.fromkeys(n for c in self._ordered_cells() for n in c.writes))

    def external_inputs(self, rate: str) -> tuple[str, ...]:
        """Names the ``rate`` cell reads that the fragment does not write itself: these come
        from other fragments (FDG edges) or from the notebook."""
        cell = self.cells.get(rate)
        if cell is None:
            return ()
        own = set(self.writes)
        return tuple(n for n in cell.inputs if n not in own or n in cell.declared_reads)

    def writes_at(self, rate: str) -> tuple[str, ...]:
        cell = self.cells.get(rate)
        return cell.writes if cell else ()

    @property
    def rates(self) -> tuple[str, ...]:
        return tuple(r for r in RATES if r in self.cells)

    def summary(self) -> str:
        """One line of what the analysis found, as the magic prints it."""
        parts = []
        for cell in self._ordered_cells():
            reads = ", ".join(self.external_inputs(cell.rate)) or "nothing"
            writes = ", ".join(cell.writes) or "nothing"
            when = "once at init" if cell.rate == "init" else f"every {cell.rate}"
            parts.append(f"reads {reads} → writes {writes} · {when}")
        extras = []
        if self.replicas is not None:
            extras.append(f"{self.replicas} replicas")
        if self.device != "cpu":
            extras.append(f"on {self.device}")
        tail = f" ({', '.join(extras)})" if extras else ""
        return f"{self.name}: " + "; ".join(parts) + tail

    def _ordered_cells(self) -> list[Cell]:
        return [self.cells[r] for r in RATES if r in self.cells]


def _check_rate(fragment: str, rate: str) -> None:
    if rate not in RATES:
        raise FragmentOptionError(
            f"fragment {fragment!r}: unknown rate {rate!r}; use --init or --every step|iteration.",
            fragment=fragment,
        )


def _check_identifier(fragment: str, name: str, *, what: str = "name") -> None:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise FragmentOptionError(
            f"fragment {fragment!r}: {what} {name!r} is not a Python identifier.",
            fragment=fragment,
        )


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", text) is not None
