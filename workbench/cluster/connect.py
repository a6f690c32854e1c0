"""Finding a Dask cluster: the notebook's client, a scheduler address, or an embedded one.

The embedded cluster is a ``LocalCluster`` whose scheduler, workers and dashboard listen
on loopback only (Dask runs any code it is sent: it belongs on a trusted network). It is
started once per process and reused by later runs.

Example:
    >>> handle = connect()                      # doctest: +SKIP
    >>> handle.client.dashboard_link            # doctest: +SKIP
    'http://127.0.0.1:8787/status'
"""
from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass

import dask
from distributed import Client, LocalCluster

from workbench.fdg.errors import RunConfigError
from workbench.fdg.inventory import Inventory, WorkerInfo

__all__ = ["ClusterHandle", "connect", "embedded_cluster", "inventory_of", "shutdown_embedded"]


@dataclass
class ClusterHandle:
    """A client plus whether workbench owns (and so may close) the cluster behind it."""

    client: Client
    owned: bool = False
    cluster: LocalCluster | None = None

    @property
    def dashboard_link(self) -> str:
        return self.client.dashboard_link

    def close(self) -> None:
        if self.owned:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


_embedded: ClusterHandle | None = None
_embedded_lock = threading.Lock()


def embedded_cluster(n_workers: int = 2, threads_per_worker: int = 1, *, quiet: bool = False) -> ClusterHandle:
    """The process's embedded ``LocalCluster`` (started on first use, on loopback)."""
    global _embedded
    with _embedded_lock:
        if _embedded is not None and _embedded.client.status == "running":
            return _embedded
        import workbench.cluster.dashboard  # noqa: F401  (registers the /workbench page before the dashboard starts)
        # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in workers to return memory to the
        # OS sooner; torch's many small allocations then page-fault constantly: we measured
        # the PPO learner 1.5× slower. RL replicas keep steady working sets, so use glibc's
        # default instead.
        try:
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                cluster = LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=threads_per_worker,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address="127.0.0.1:8787",
                    silence_logs=logging.ERROR,
                )
        except RuntimeError as exc:
            raise RunConfigError(
                f"the embedded Dask cluster could not start its workers ({exc}). Worker "
                "processes re-import the main script: in a script, start runs under "
                "`if __name__ == \"__main__\":`; from stdin or `python -c`, use the inline "
                "policy or pass cluster=ADDRESS of a running scheduler."
            ) from None
        client = Client(cluster, set_as_default=False)
        client.run(_warm_up)
        _embedded = ClusterHandle(client, owned=True, cluster=cluster)
        atexit.register(shutdown_embedded)
        if not quiet:
            print(f"workbench: started a local Dask cluster ({n_workers} workers on 127.0.0.1); "
                  f"dashboard: {client.dashboard_link}")
        return _embedded


def shutdown_embedded() -> None:
    """Close the embedded cluster, if one was started. Workers still sending heartbeats as
    the scheduler goes log connection errors: those are expected here, so they are hushed."""
    global _embedded
    with _embedded_lock:
        if _embedded is None:
            return
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
        try:
            _embedded.close()
        finally:
            _embedded = None


def connect(cluster: Client | str | None = None, *, quiet: bool = False, timeout: float = 10.0) -> ClusterHandle:
    """A handle on the cluster to run on.

    ``cluster`` may be a ``distributed.Client``, a scheduler address (``tcp://host:8786``),
    or None: then the notebook's default client if it has one, else the embedded cluster.
    """
    if isinstance(cluster, Client):
        return ClusterHandle(cluster)
    if isinstance(cluster, str):
        try:
            client = Client(cluster, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise RunConfigError(
                f"could not reach a Dask scheduler at {cluster!r} within {timeout:g} s ({exc}). "
                "Check the address (tcp://HOST:PORT) and that the scheduler is running, or leave "
                "--cluster out to use the embedded local cluster."
            ) from None
        client.run(_warm_up)
        return ClusterHandle(client, owned=True)
    if cluster is not None:
        raise RunConfigError(
            f"cluster must be a distributed.Client, a scheduler address or None, not {type(cluster).__name__}."
        )
    try:
        from distributed import default_client

        return ClusterHandle(default_client())
    except ValueError:
        return embedded_cluster(quiet=quiet)


def inventory_of(client: Client) -> Inventory:
    """The scheduler's view of the workers, as plain data (sorted by worker name)."""
    info = client.scheduler_info(n_workers=-1)["workers"] if _accepts_n_workers(client) else client.scheduler_info()["workers"]
    workers = [
        WorkerInfo(
            address=addr,
            name=str(w.get("name", addr)),
            nthreads=int(w.get("nthreads", 1)),
            gpus=int(w.get("resources", {}).get("GPU", 0)),
            memory_limit=int(w.get("memory_limit") or 0),
        )
        for addr, w in info.items()
    ]
    workers.sort(key=lambda w: (len(w.name), w.name))
    return Inventory(tuple(workers))


def _accepts_n_workers(client: Client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _warm_up(dask_worker=None) -> None:
    """Import the heavy libraries once per worker so the first iteration is not slow, and
    give torch this worker's share of the cores (not all of them: workers share a host)."""
    import numpy  # noqa: F401

    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(max(1, dask_worker.state.nthreads))
    # the first optimizer a process builds imports torch._dynamo (~1.3 s here): pay it now
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
