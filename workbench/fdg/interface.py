"""Interfaces: a name flowing from the fragment that writes it to a fragment that reads it.

An interface's behaviour follows from the rates of its two ends (MSRL's generated
interfaces) and, once a policy fixes them, from the replica counts:

======================  ===========================================================
producer → consumer     what the consumer sees
======================  ===========================================================
step → step             the value of this step (or the last step's, if the
                        consumer runs first: the loop carries it)
step → iteration        the ``T`` values written during the iteration, ``[T, …]``
iteration/init → step   the latest value, fixed for the whole iteration
init → init             the value the producer's init cell wrote
======================  ===========================================================

and across replicas: many → one gathers along the batch axis, one → many broadcasts,
same count → same count is one-to-one.

Example:
    >>> Interface("obs", "env", ("init", "step"), "learner", "iteration").timing
    'stacked'
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.fdg.vocabulary import TIMINGS, Rate, Timing

__all__ = ["Interface", "spatial_kind", "TIMINGS"]


@dataclass(frozen=True)
class Interface:
    """One edge of the FDG: ``name`` from ``producer`` to ``consumer``'s ``consumer_rate`` cell.

    ``producer_rates`` lists the rates at which the producer binds the name.
    """

    name: str
    producer: str
    producer_rates: tuple[Rate, ...]
    consumer: str
    consumer_rate: Rate

    @property
    def timing(self) -> Timing:
        """``per-step``, ``stacked``, ``latest``, ``per-iteration`` or ``once``."""
        if self.consumer_rate == "init":
            return "once"
        if self.consumer_rate == "step":
            return "per-step" if "step" in self.producer_rates else "latest"
        # consumer runs once per iteration
        if "step" in self.producer_rates:
            return "stacked"
        return "per-iteration" if "iteration" in self.producer_rates else "latest"

    @property
    def carried_from_init(self) -> bool:
        """The producer gives the name a first value at init, so a consumer that runs before
        it within a step (or iteration) reads the previous value instead of waiting."""
        return "init" in self.producer_rates

    @property
    def source_rate(self) -> str:
        """The producer rate whose value the consumer takes."""
        if self.timing in ("per-step", "stacked"):
            return "step"
        if self.timing == "once":
            return "init"
        return "iteration" if "iteration" in self.producer_rates else "init"

    def describe(self) -> str:
        return f"{self.producer} → {self.consumer}: {self.name} ({TIMINGS[self.timing]})"


def spatial_kind(producer_replicas: int, consumer_replicas: int, *, scatter: bool = False) -> str:
    """How values move between replica sets: ``one-to-one``, ``gather``, ``broadcast`` or
    ``scatter``. Returns ``incompatible`` for m → n with m ≠ n and neither 1.

    >>> spatial_kind(4, 1), spatial_kind(1, 4), spatial_kind(2, 2)
    ('gather', 'broadcast', 'one-to-one')
    """
    if producer_replicas == consumer_replicas:
        return "one-to-one"
    if consumer_replicas == 1:
        return "gather"
    if producer_replicas == 1:
        return "scatter" if scatter else "broadcast"
    return "incompatible"
