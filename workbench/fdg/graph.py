"""The fragmented dataflow graph: fragments connected by the names they write and read.

Example:
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = reset()", rate="init")
    >>> _ = fdg.add_fragment("actor", "action = choose(obs)", rate="step")
    >>> _ = fdg.add_fragment("env", "obs, reward = step(action)", rate="step")
    >>> [i.describe() for i in fdg.interfaces]
    ['actor → env: action (every step)', 'env → actor: obs (every step)']
    >>> fdg.schedule().step_order
    ('actor', 'env')
"""

from __future__ import annotations

import builtins
import difflib
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workbench.fdg.errors import (
    ConflictingWritersError,
    FDGError,
    FragmentOptionError,
    StepCycleError,
    UndefinedNameError,
)
from workbench.fdg.fragment import RATES, Fragment, default_rate
from workbench.fdg.interface import Interface
from workbench.fdg.options import parse_fragment_line

__all__ = ["Graph", "Schedule"]


@dataclass(frozen=True)
class Schedule:
    """The order fragments run within each phase of the loop.

    One iteration is ``T`` repetitions of ``step_order`` followed by ``iteration_order``;
    ``init_order`` runs once at deploy.
    """

    init_order: tuple[str, ...]
    step_order: tuple[str, ...]
    iteration_order: tuple[str, ...]

    def order(self, rate: str) -> tuple[str, ...]:
        return {"init": self.init_order, "step": self.step_order, "iteration": self.iteration_order}[rate]


class Graph:
    """Fragments plus the interfaces between them. Pure data: no cluster, no notebook.

    The graph is edited one cell at a time; each edit is validated before it is applied,
    so a rejected cell leaves the graph as it was.
    """

    def __init__(self, fragments: Iterable[Fragment] = ()) -> None:
        self._fragments: dict[str, Fragment] = {f.name: f for f in fragments}

    # -- editing -----------------------------------------------------------------------
    def add_fragment(
        self,
        name: str,
        code: str,
        *,
        rate: str | None = None,
        replicas: int | None = None,
        device: str | None = None,
        reads: Iterable[str] = (),
        writes: Iterable[str] = (),
    ) -> Fragment:
        """Register (or replace) the ``rate`` cell of fragment ``name`` and return the fragment.

        ``rate`` defaults to ``iteration`` for a learner and ``step`` otherwise. ``replicas``
        and ``device``, when given, replace the fragment's earlier wishes. ``reads`` and
        ``writes`` declare names the syntax tree cannot show.
        """
        rate = rate or default_rate(name)
        for what, names in (("reads", reads), ("writes", writes)):
            if isinstance(names, str):  # tuple('obs') would quietly declare 'o', 'b' and 's'
                raise FragmentOptionError(
                    f"fragment {name!r}: {what} must be a list of names, got the string "
                    f"{names!r}; write {what}=[{names!r}].",
                    fragment=name,
                )
        existing = self._fragments.get(name) or Fragment(name)
        updated = Fragment(
            name,
            cells=existing.cells,
            replicas=replicas if replicas is not None else existing.replicas,
            device=device if device is not None else existing.device,
        ).with_cell(rate, code, reads=tuple(reads), writes=tuple(writes))
        candidate = {**self._fragments, name: updated}
        _check_single_writers(candidate)
        self._fragments = candidate
        return updated

    def add_cell(self, magic_line: str, code: str) -> Fragment:
        """Register a cell given as a notebook has it: its ``%%fragment NAME [options]``
        line and its body.

        >>> Graph().add_cell("%%fragment actor --replicas 2", "action = 1").replicas
        2
        """
        options = parse_fragment_line(magic_line.strip().removeprefix("%%fragment"))
        return self.add_fragment(code=code, **options)

    def remove_fragment(self, name: str) -> None:
        if name not in self._fragments:
            raise FDGError(f"no fragment named {name!r}; fragments are: {self._names_or_none()}.")
        del self._fragments[name]

    def clear(self) -> None:
        self._fragments.clear()

    def copy(self) -> "Graph":
        return type(self)(self._fragments.values())

    # -- reading -----------------------------------------------------------------------
    @property
    def fragments(self) -> Mapping[str, Fragment]:
        return dict(self._fragments)

    def __len__(self) -> int:
        return len(self._fragments)

    def __contains__(self, name: object) -> bool:
        return name in self._fragments

    def __getitem__(self, name: str) -> Fragment:
        try:
            return self._fragments[name]
        except KeyError:
            raise FDGError(f"no fragment named {name!r}; fragments are: {self._names_or_none()}.") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self._fragments == other._fragments

    def writers(self) -> dict[str, list[str]]:
        """name → the fragments that bind it."""
        out: dict[str, list[str]] = {}
        for frag in self._fragments.values():
            for name in frag.writes:
                out.setdefault(name, []).append(frag.name)
        return out

    @property
    def interfaces(self) -> list[Interface]:
        """Every edge: a name one fragment writes and another reads."""
        writers = self.writers()
        edges = []
        for consumer in self._fragments.values():
            for rate in consumer.rates:
                for name in consumer.external_inputs(rate):
                    for producer in writers.get(name, ()):
                        if producer == consumer.name:
                            continue
                        rates = tuple(r for r in RATES if name in self._fragments[producer].writes_at(r))
                        edges.append(Interface(name, producer, rates, consumer.name, rate))
        return edges

    def notebook_names(self) -> list[str]:
        """Names fragments read that no fragment writes: they come from the notebook."""
        writers = self.writers()
        names = {}
        for frag in self._fragments.values():
            for rate in frag.rates:
                for name in frag.external_inputs(rate):
                    if name not in writers:
                        names.setdefault(name, None)
        return list(names)

    # -- validation --------------------------------------------------------------------
    def validate(self, namespace: Mapping[str, object] | None = None) -> Schedule:
        """Check the graph is runnable and return its :class:`Schedule`.

        With ``namespace`` (the notebook's variables), also checks that every name no
        fragment writes is defined there.
        """
        if not self._fragments:
            raise FDGError(
                "the FDG has no fragments yet: register cells with %%fragment NAME (or fdg.add_fragment) first."
            )
        _check_single_writers(self._fragments)
        self._check_first_values()
        if namespace is not None:
            self._check_defined(namespace)
            self._check_shadowed_modules(namespace)
        return self.schedule()

    def schedule(self) -> Schedule:
        """The order of fragments in each phase (raises :class:`StepCycleError`)."""
        edges = self.interfaces
        return Schedule(
            init_order=self._phase_order("init", edges),
            step_order=self._phase_order("step", edges),
            iteration_order=self._phase_order("iteration", edges),
        )

    def _check_first_values(self) -> None:
        """Reads that happen before their producer can have run need a value from its init
        cell: an init cell reading anything, and a step cell reading a per-iteration value
        (the first iteration's steps run before any iteration cell)."""
        for edge in self.interfaces:
            if "init" in edge.producer_rates:
                continue
            if edge.consumer_rate == "init":
                raise FDGError(
                    f"fragment {edge.consumer}'s init cell reads {edge.name!r}, which "
                    f"{edge.producer} writes only every {edge.producer_rates[0]}; init cells "
                    f"run before any step. Write {edge.name!r} in {edge.producer}'s --init "
                    f"cell too, or read it in {edge.consumer}'s step or iteration cell."
                )
            if edge.consumer_rate == "step" and edge.timing == "latest":
                raise FDGError(
                    f"fragment {edge.consumer}'s step cell reads {edge.name!r}, which "
                    f"{edge.producer} writes only every iteration: the first iteration's steps "
                    f"run before any iteration cell. Give {edge.name!r} a first value in "
                    f"{edge.producer}'s --init cell."
                )

    def _check_shadowed_modules(self, namespace: Mapping[str, object]) -> None:
        """A fragment that rebinds a name the notebook holds as a module (``wb = None``,
        ``np = …``) becomes that name's writer: every other fragment reading it gets the
        fragment's value, not the module, and fails at its own line far from the cause.
        Blame the cell that rebinds it, before anything runs."""
        for edge in self.interfaces:
            value = namespace.get(edge.name)
            if not isinstance(value, types.ModuleType):
                continue
            producer = self._fragments[edge.producer]
            rate = edge.producer_rates[0]
            line = producer.cells[rate].line_of(edge.name)
            raise FDGError(
                f"fragment {edge.producer!r} ({rate} cell{f', cell line {line}' if line else ''}) "
                f"rebinds {edge.name!r}, which the notebook defines as the module "
                f"{value.__name__}; fragment {edge.consumer!r} ({edge.consumer_rate} cell) reads "
                f"{edge.name!r}, so it would get the value {edge.producer}'s cell binds instead of "
                "the module. Use another name in that cell."
            )

    def _check_defined(self, namespace: Mapping[str, object]) -> None:
        writers = self.writers()
        known = set(namespace) | set(dir(builtins)) | set(writers)
        for frag in self._fragments.values():
            for rate in frag.rates:
                for name in frag.external_inputs(rate):
                    if name in known:
                        continue
                    close = difflib.get_close_matches(name, sorted(known), n=1)
                    raise UndefinedNameError(
                        frag.name, rate, name, frag.cells[rate].line_of(name), close[0] if close else ""
                    )

    def _phase_order(self, rate: str, edges: list[Interface]) -> tuple[str, ...]:
        """Topological order of the ``rate`` cells. Edges whose name the producer also
        writes at init are *weak*: they may be cut (the loop carries last value)."""
        nodes = [f.name for f in self._fragments.values() if rate in f.cells]
        incoming: dict[str, dict[str, list[Interface]]] = {n: {} for n in nodes}
        for e in edges:
            if e.consumer_rate == rate and rate in e.producer_rates and e.consumer in incoming:
                if e.producer in incoming:
                    incoming[e.consumer].setdefault(e.producer, []).append(e)
        order: list[str] = []
        remaining = list(nodes)
        while remaining:
            ready = [n for n in remaining if not any(p in remaining for p in incoming[n])]
            if not ready:
                # a ring: start it at a fragment whose pending inputs all have a first value
                # (init cells have nothing earlier to carry: a ring of them is always an error)
                ready = (
                    []
                    if rate == "init"
                    else [
                        n
                        for n in remaining
                        if all(e.carried_from_init for p, es in incoming[n].items() if p in remaining for e in es)
                    ]
                )
                if not ready:
                    raise StepCycleError(_find_cycle(remaining, incoming, rate), rate)
            order.append(ready[0])
            remaining.remove(ready[0])
        return tuple(order)

    def _names_or_none(self) -> str:
        return ", ".join(map(repr, self._fragments)) or "none yet"

    def __repr__(self) -> str:
        lines = [f"FDG with {len(self._fragments)} fragments"]
        lines += [f"  {f.summary()}" for f in self._fragments.values()]
        return "\n".join(lines)


def _check_single_writers(fragments: Mapping[str, Fragment]) -> None:
    writers: dict[str, list[str]] = {}
    for frag in fragments.values():
        for name in frag.writes:
            writers.setdefault(name, []).append(frag.name)
    for name, names in writers.items():
        if len(names) < 2:
            continue
        readers = [
            f.name
            for f in fragments.values()
            if f.name not in names and any(name in f.external_inputs(r) for r in f.rates)
        ]
        if readers:
            raise ConflictingWritersError(name, names, readers)


def _find_cycle(remaining: list[str], incoming, rate: str) -> list[tuple[str, str, str]]:
    """One ring of uncarried edges among ``remaining``, as (producer, name, consumer)."""
    strong = {
        n: [
            (p, e.name)
            for p, es in incoming[n].items()
            if p in remaining
            for e in es
            if rate == "init" or not e.carried_from_init
        ]
        for n in remaining
    }
    start = next(n for n in remaining if strong[n])
    path, seen, node = [], {}, start
    while node not in seen:
        seen[node] = len(path)
        producer, name = strong[node][0]
        path.append((producer, name, node))
        node = producer
    ring = path[seen[node] :]
    ring.reverse()
    return ring
