"""Whether a run's replica channels use TLS, and the certificates they use: the cluster's.

A run on a TLS cluster (a ``tls://`` scheduler, or a client whose Dask ``Security`` requires
encryption) sends trajectories, weights, snapshots and reports over TLS too
(:mod:`workbench.runtime.transport.wire`): a worker's channels take its own Dask certificates
(``get_worker().security``, role "worker"), the notebook's channel server (reports and
snapshots) the client's (``client.security``, role "client"). Both are signed by the
cluster's CA, which every side checks; Dask already required each of them to reach the
scheduler. On a plain cluster (the embedded loopback one) the channels stay plain.
"""

from __future__ import annotations

import threading

from workbench.errors import RunConfigError
from workbench.runtime.transport.wire import ChannelTLS

__all__ = ["cluster_uses_tls", "channel_tls", "worker_channel_tls"]

_cache: dict[int, tuple[object, str, ChannelTLS]] = {}
_cache_lock = threading.Lock()


def cluster_uses_tls(client) -> bool:
    """Whether ``client``'s cluster speaks TLS: its scheduler address is ``tls://…``, or
    its ``Security`` requires encryption (Dask then refuses plain connections anyway)."""
    address = str(getattr(getattr(client, "scheduler", None), "address", "") or "")
    security = getattr(client, "security", None)
    return address.startswith("tls://") or bool(getattr(security, "require_encryption", False))


def channel_tls(security, role: str, where: str) -> ChannelTLS:
    """The channel TLS contexts made from a Dask ``Security`` for ``role`` ("worker" or
    "client"); kept per ``Security`` object, since building one reads (or, for in-memory
    certificates, writes out and reads) the PEM files: ~30 ms."""
    with _cache_lock:
        hit = _cache.get(id(security))
        if hit is not None and hit[0] is security and hit[1] == role:
            return hit[2]
    server = security.get_listen_args(role)["ssl_context"] if security is not None else None
    client = security.get_connection_args(role)["ssl_context"] if security is not None else None
    if server is None or client is None:
        raise RunConfigError(
            f"the cluster uses TLS, but {where} has no TLS certificate for its {role} role "
            f"(distributed.comm.tls.ca-file and distributed.comm.tls.{role}.cert are unset there), "
            "so the run's replica channels cannot be encrypted. Give it the cluster's CA file, "
            "certificate and key, as for connecting to the scheduler (docs/security.md)."
        )
    tls = ChannelTLS(server=server, client=client)
    with _cache_lock:
        if len(_cache) > 16:  # a long-lived notebook that made many clients
            _cache.clear()
        _cache[id(security)] = (security, role, tls)
    return tls


def worker_channel_tls() -> ChannelTLS:
    """This worker's channel TLS contexts, from the certificates it joined the cluster with."""
    from distributed import get_worker

    worker = get_worker()
    return channel_tls(getattr(worker, "security", None), "worker", f"worker {worker.name!r}")
