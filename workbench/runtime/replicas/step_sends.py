"""A replica's per-step values for other groups, sent as its step cells write them.

Each value goes on the channel its route says: gathered by one reader (an env replica's
observations for the actor), or scattered among the reader's replicas (the actor's actions
for the env replicas: each replica its own rows, the mirror of the gather of theirs;
:mod:`workbench.runtime.values.scatter`). An env replica that steps one plain env says its values
have no batch axis (:class:`~workbench.runtime.values.arrays.Unbatched`)."""

from __future__ import annotations

import time

from workbench.runtime.values.arrays import Unbatched
from workbench.runtime.values.scatter import RowsAmbiguous

__all__ = ["send_step_values"]


def send_step_values(replica, frag: str, ns: dict, sends, iteration) -> None:
    """Send what ``frag``'s cell (of ``replica``) wrote in ``ns`` for each of ``sends``."""
    sent_keys = set()
    for send in sends:
        value = replica._written(frag, "step", ns, send.name, iteration)
        value = Unbatched(value) if frag in replica.unbatched and send.spatial == "gather" else value
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            replica.peers.send(send.consumer_group, send.spatial, send.key, replica._sent.get(send.key, 0), value)
        except RowsAmbiguous as exc:
            raise replica._cell_error(
                frag,
                "step",
                iteration,
                f"it writes {send.name!r}, which is split among the "
                f"replicas of {send.consumer_group!r} every step, and {exc}",
            ) from None
        replica.step_send_seconds += time.perf_counter() - start
        replica.step_send_cpu_seconds += time.thread_time() - cpu
        sent_keys.add(send.key)
    for key in sent_keys:
        replica._sent[key] = replica._sent.get(key, 0) + 1
