"""A replica as a worker keeps it, and the addresses postmen use to reach replicas.

Each deployed replica has a mailbox and a channel server. The servers of one run in one
worker process share a map of that run's mailboxes (``routes``), so any of them can file
what arrives for any replica there; the driver gives every replica of a worker the same
address (:func:`gateways`), and a postman keeps one connection per worker
(:mod:`workbench.runtime.transport.socket_postman`).
"""

from __future__ import annotations

from workbench.cluster.channel_security import worker_channel_tls
from workbench.runtime.transport.channels import Mailbox, SocketServer
from workbench.runtime.engine.driver import close_envs
from workbench.runtime.replicas.replica import GroupReplica

__all__ = ["Deployed", "gateways"]


class Deployed:
    """One replica on a worker: its state, mailbox and channel server."""

    def __init__(
        self, replica: GroupReplica, authkey: bytes, host: str, tls: bool = False, routes: dict | None = None
    ) -> None:
        self.replica = replica
        self.mailbox = Mailbox(replica.program.arrival_keys)
        # ``routes``: the run's mailboxes in this process, shared by its servers, so that
        # any of them files what a postman sends for any replica here (socket_postman)
        if routes is not None:
            routes[(replica.program.group, replica.index)] = self.mailbox
        self.server = SocketServer(self.mailbox, host, authkey, worker_channel_tls() if tls else None, routes)

    def close(self) -> None:
        self.server.close()
        for ns in self.replica.namespaces.values():
            close_envs(ns)


def gateways(workers: dict[tuple[str, int], str], addresses: dict[tuple[str, int], tuple]) -> dict:
    """Each replica's channel address as postmen use it: every replica of a worker gets
    the same one (its first replica's server), so a postman holds one connection per
    worker, not per replica (workbench.runtime.transport.socket_postman).

    >>> gateways({("actor", 0): "w1", ("actor", 1): "w1", ("learner", 0): "w2"},
    ...          {("actor", 0): ("h", 1), ("actor", 1): ("h", 2), ("learner", 0): ("h", 3)})
    {('actor', 0): ('h', 1), ('actor', 1): ('h', 1), ('learner', 0): ('h', 3)}
    """
    first: dict[str, tuple] = {}
    for key in sorted(workers):
        first.setdefault(workers[key], addresses[key])
    return {key: first[workers[key]] for key in addresses}
