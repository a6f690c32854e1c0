"""Finding a Dask cluster: the notebook's client, a scheduler address, or an embedded one.

The embedded cluster is a ``LocalCluster`` whose scheduler, workers and dashboard listen
on loopback only (Dask runs any code it is sent: it belongs on a trusted network). It is
started once per process and reused by later runs. A remote scheduler is reached by
address, over TLS when it was started with TLS (docs/security.md); every way that can go
wrong ends, within the timeout, in a :class:`RunConfigError` that says which it was.

Example:
    >>> handle = connect()                      # doctest: +SKIP
    >>> handle.client.dashboard_link            # doctest: +SKIP
    'http://127.0.0.1:8787/status'
    >>> secure = Security(tls_ca_file="ca.pem", tls_client_cert="cert.pem",
    ...                   tls_client_key="key.pem", require_encryption=True)
    >>> handle = connect("tls://10.0.0.5:8786", security=secure)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dask
from distributed import Client, LocalCluster, WorkerPlugin
from distributed.comm.core import CommClosedError
from distributed.deploy import Cluster
from distributed.security import Security

from workbench.cluster._dask_compat import workers_info
from workbench.cluster.forkserver import start_forkserver, worker_start_settings
from workbench.cluster.quiet_workers import QUIET_WORKER_CONFIG, embedded_worker_count, oversubscribed
from workbench.cluster.restart_tolerant import PatientLocalCluster
from workbench.cluster.pinning import pinning_plugin
from workbench.errors import RunConfigError
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.loaded_modules import loaded

__all__ = ["ClusterHandle", "connect", "embedded_cluster", "inventory_of", "shutdown_embedded"]


@dataclass
class ClusterHandle:
    """A client plus whether workbench owns (and so may close) the cluster behind it."""

    client: Client
    owned: bool = False
    cluster: LocalCluster | None = None
    #: set once the dashboard's pages answer: from the start, unless they come at their
    #: first visit (``embedded_cluster(dashboard_later=True)``)
    dashboard_ready: threading.Event = field(default_factory=lambda: _set(threading.Event()))

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

#: Where the embedded cluster listens: loopback only (anyone who can reach a Dask scheduler
#: can run code on its workers). The dashboard keeps Dask's usual port.
EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_DASHBOARD_ADDRESS = "127.0.0.1:8787"


def embedded_cluster(
    n_workers: int | None = None, threads_per_worker: int = 1, *, quiet: bool = False, dashboard_later: bool = False
) -> ClusterHandle:
    """The process's embedded ``LocalCluster`` (started on first use, on loopback).

    ``n_workers`` None sizes it to the host: one single-thread worker per usable core, at
    least 2, or ``WORKBENCH_WORKERS`` when set (``workbench.cluster.quiet_workers.embedded_worker_count``).
    ``dashboard_later``: the scheduler starts without its dashboard's pages; they are built
    at the first visit of its address (:mod:`workbench.cluster.pages_on_visit`), and
    ``handle.dashboard_ready`` is set once they are.
    """
    global _embedded
    if n_workers is None:
        try:
            n_workers = embedded_worker_count()
        except ValueError as exc:
            raise RunConfigError(f"{exc} (it sets how many workers the embedded Dask cluster starts).") from None
    with _embedded_lock:
        if _embedded is not None and _embedded.client.status == "running":
            return _embedded
        # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in workers to return memory to the
        # OS sooner; torch's many small allocations then page-fault constantly: we measured
        # the PPO learner 1.5× slower. RL replicas keep steady working sets, so use glibc's
        # default instead.
        settings: dict = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
        try:
            # workers forked from a server that imported torch once (cluster.forkserver)
            settings.update(worker_start_settings())
            pin = pinning_plugin(n_workers, threads_per_worker)  # each worker on a core of its own
        except ValueError as exc:
            raise RunConfigError(f"{exc} (it sets how the embedded Dask cluster starts its workers).") from None
        if oversubscribed(n_workers, threads_per_worker):
            # more worker threads than cores: Dask's per-worker background work (profiler,
            # tick and memory monitors) would take a core or more (workbench.cluster.quiet_workers)
            settings.update(QUIET_WORKER_CONFIG)
        with dask.config.set(settings):
            start_forkserver()  # first: its imports (torch…) run beside the dashboard's and the scheduler's start
        if not dashboard_later:
            import workbench.cluster.dashboard  # noqa: F401  (registers the /workbench page before the dashboard starts)

        try:
            with dask.config.set(settings):
                # patient: a worker its nanny restarts (a crash, a stuck cell's stop) may
                # take longer than Dask's 15 s to come back on a busy machine
                cluster = PatientLocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=threads_per_worker,
                    processes=True,
                    host=EMBEDDED_HOST,
                    dashboard_address=EMBEDDED_DASHBOARD_ADDRESS,
                    # later: its HTTP server listens now, its pages come at their first visit
                    scheduler_kwargs={"dashboard": False} if dashboard_later else None,
                    silence_logs=logging.ERROR,
                )
        except RuntimeError as exc:
            raise RunConfigError(
                f"the embedded Dask cluster could not start its workers ({exc}). Worker "
                "processes re-import the main script: in a script, start runs under "
                '`if __name__ == "__main__":`; from stdin or `python -c`, use the inline '
                "policy or pass cluster=ADDRESS of a running scheduler."
            ) from None
        client = Client(cluster, set_as_default=False)
        # before anything else runs there: Kernel ▸ Interrupt signals the kernel's whole
        # process group, and the embedded workers must not die of it (they keep the run's
        # next attempt); workers the nanny restarts get the plugin too
        client.register_plugin(DetachFromKernelSignals(), name="workbench-detach")
        if pin is not None:
            client.register_plugin(pin, name=pin.name)
        client.run(_warm_up, on_error="ignore")  # a worker lost meanwhile is the run's to find
        _embedded = ClusterHandle(client, owned=True, cluster=cluster)
        if dashboard_later:
            from workbench.cluster.pages_on_visit import serve_pages_on_first_visit

            _embedded.dashboard_ready = threading.Event()
            serve_pages_on_first_visit(cluster.scheduler, _embedded.dashboard_ready)
        atexit.register(shutdown_embedded)
        # every path that starts the cluster says where its dashboard is (quiet or not:
        # later runs reuse it and would never say), pointing at workbench's own page
        lean = (
            "; more workers than cores: lean Dask settings"
            if oversubscribed(n_workers, threads_per_worker)
            else "; one per core"
            if pin is not None
            else ""
        )
        print(
            f"workbench: started a local Dask cluster ({n_workers} workers on 127.0.0.1{lean}); "
            f"dashboard: {workbench_page(client)}"
        )
        return _embedded


def start_embedded_in_background(n_workers: int | None = None, *, dashboard_later: bool = False) -> threading.Thread:
    """Start the embedded cluster in a thread and return at once.

    The command line calls this before it loads the notebook: the notebook's imports (torch)
    and the workers' (torch again, in every worker) then run side by side instead of one
    after the other (~1 s of a 2-core machine's ~8 s coarse quickstart). The run's own
    :func:`embedded_cluster` call waits for it (the start holds the lock). A start that fails
    here is not reported here: that call tries again in the foreground and raises its error.
    ``dashboard_later`` as for :func:`embedded_cluster`.

    >>> thread = start_embedded_in_background()          # doctest: +SKIP
    >>> embedded_cluster() is embedded_cluster()         # doctest: +SKIP
    True
    """

    def start() -> None:
        try:
            embedded_cluster(n_workers, dashboard_later=dashboard_later)
        except Exception:  # noqa: BLE001 - the foreground call reports it
            pass

    thread = threading.Thread(target=start, name="workbench-embedded-start", daemon=True)
    thread.start()
    return thread


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


def workbench_page(client: Client) -> str:
    """The workbench page of the cluster's dashboard (Dask's link points at /status)."""
    link = client.dashboard_link or ""
    return link[: -len("/status")] + "/workbench" if link.endswith("/status") else link


class DetachFromKernelSignals(WorkerPlugin):
    """Moves an embedded worker process into a process group of its own, so the SIGINT a
    Jupyter interrupt sends to the kernel's process group does not kill it (the kernel
    stops the run itself: its loops are cancelled and the workers stay for the next)."""

    def setup(self, worker) -> None:
        import os

        try:
            os.setpgid(0, 0)
        except OSError:  # already a group leader, or not permitted: nothing to move
            pass


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


def connect(
    cluster: Client | str | None = None, *, quiet: bool = False, timeout: float = 10.0, security: Security | None = None
) -> ClusterHandle:
    """A handle on the cluster to run on.

    ``cluster`` may be a ``distributed.Client``, a Dask cluster object (``LocalCluster``,
    dask-cuda's ``LocalCUDACluster``: a client of it is opened, and closed after), a
    scheduler address (``tcp://host:8786``, or ``tls://host:8786`` for a scheduler started
    with TLS), or None: then the notebook's default client if it has one, else the
    embedded cluster. ``security`` (a ``distributed.security.Security`` with the CA,
    client certificate and key) is used to connect to an address; without it a
    ``tls://`` address takes its certificates from Dask's config
    (``distributed.comm.tls.*``). See docs/security.md.
    """
    if security is not None and not isinstance(security, Security):
        raise RunConfigError(
            f"security must be a distributed.security.Security, not {type(security).__name__}: "
            "Security(tls_ca_file=CA, tls_client_cert=CERT, tls_client_key=KEY, require_encryption=True)."
        )
    if isinstance(cluster, Client):
        if security is not None:
            raise RunConfigError(
                "security= applies to a scheduler address; a Client already has "
                "its own (Client(address, security=...))."
            )
        return ClusterHandle(cluster)
    if isinstance(cluster, Cluster):  # LocalCluster, dask-cuda's LocalCUDACluster, …: the user's
        if security is not None:
            raise RunConfigError("security= applies to a scheduler address; a cluster object has its own.")
        client = Client(cluster, set_as_default=False)  # ours to close; the cluster stays theirs
        client.run(_warm_up, on_error="ignore")  # a worker lost meanwhile is the run's to find
        return ClusterHandle(client, owned=True)
    if isinstance(cluster, str):
        client = _open_client(cluster, timeout, security)
        client.run(_warm_up, on_error="ignore")  # a worker lost meanwhile is the run's to find
        return ClusterHandle(client, owned=True)
    if cluster is not None:
        raise RunConfigError(
            f"cluster must be a distributed.Client, a Dask cluster object (LocalCluster, dask-cuda's "
            f"LocalCUDACluster), a scheduler address or None, not {type(cluster).__name__}."
        )
    if security is not None:
        raise RunConfigError("security= needs a scheduler address (tls://HOST:PORT) to connect to.")
    try:
        from distributed import default_client

        return ClusterHandle(default_client())
    except ValueError:
        return embedded_cluster(quiet=quiet)


_TLS_ADVICE = (
    "the certificates: security=Security(tls_ca_file=CA, tls_client_cert=CERT, "
    "tls_client_key=KEY, require_encryption=True) in Python, --tls-ca-file/--tls-cert/"
    "--tls-key for `workbench run`, or distributed.comm.tls.* in Dask's config "
    "(see docs/security.md)"
)


def _handshake(address: str, timeout: float, security: Security | None) -> None:
    """Connect to ``address`` and exchange Dask's handshake once, all within ``timeout``.

    ``Client(address, timeout=...)`` bounds only the TCP connect: a service that accepts the
    connection but never answers the handshake (an HTTP port, say) makes it wait forever.
    Runs in a thread of its own, as a notebook's thread already has a running event loop.
    """
    from distributed.comm import connect as dask_connect

    args = (security or Security()).get_connection_args("client")

    async def attempt() -> None:
        comm = await asyncio.wait_for(dask_connect(address, timeout=timeout, **args), timeout + 0.5)
        await comm.close()

    with ThreadPoolExecutor(1, thread_name_prefix="connect-probe") as pool:
        pool.submit(asyncio.run, attempt()).result()


def _open_client(address: str, timeout: float, security: Security | None) -> Client:
    """A client of the scheduler at ``address``, or a :class:`RunConfigError` that says which
    of the usual mistakes it is (no scheduler there, plain vs TLS, a malformed address)."""
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    try:
        _handshake(address, timeout, security)
        return Client(address, timeout=timeout, set_as_default=False, security=security)
    except (TimeoutError, asyncio.TimeoutError):  # connected, but no Dask handshake came back
        raise RunConfigError(
            f"{address!r} accepted the connection but did not answer as a Dask scheduler within "
            f"{timeout:g} s. Is it the scheduler's port (8786 by default), not the dashboard's "
            "(8787) or another service?"
        ) from None
    except ValueError as exc:  # distributed parses the address before connecting
        raise RunConfigError(
            f"{address!r} is not a Dask scheduler address ({exc}). Give it as tcp://HOST:PORT, "
            "or tls://HOST:PORT for a scheduler started with TLS."
        ) from None
    except TypeError as exc:
        if scheme != "tls" and "ssl" not in str(exc).lower():
            raise
        raise RunConfigError(
            f"{address!r} is a TLS address, but no TLS certificates were given. Pass {_TLS_ADVICE}."
        ) from None
    except RuntimeError as exc:
        if "encryption required" not in str(exc):
            raise
        raise RunConfigError(
            f"TLS was asked for (require_encryption), but {address!r} is not a tls:// address: "
            "connect to tls://HOST:PORT, the scheduler started with --tls-ca-file/--tls-cert/"
            "--tls-key."
        ) from None
    except ssl.SSLError as exc:
        raise RunConfigError(
            f"the TLS certificates for {address!r} could not be used ({exc}). Give the CA "
            "certificate that signed the scheduler's, this client's certificate and its private "
            "key, as PEM files that belong together."
        ) from None
    except CommClosedError as exc:  # something listens there, and hung up on us
        if scheme == "tls":
            raise RunConfigError(
                f"the TLS handshake with {address!r} failed ({exc}): the two sides do not trust "
                "each other's certificates. Use the CA that signed the scheduler's certificate, "
                "and a client certificate signed by the cluster's CA."
            ) from None
        raise RunConfigError(
            f"the scheduler at {address!r} closed the plain (unencrypted) connection ({exc}): it "
            f"probably requires TLS. Connect to tls://… instead, with {_TLS_ADVICE}."
        ) from None
    except (OSError, TimeoutError) as exc:
        raise RunConfigError(
            f"could not reach a Dask scheduler at {address!r} within {timeout:g} s ({exc}). "
            "Check the address (tcp://HOST:PORT) and that the scheduler is running, or leave "
            "--cluster out to use the embedded local cluster."
        ) from None
    except Exception as exc:  # something answered, but not as a Dask scheduler speaks
        raise RunConfigError(
            f"{address!r} did not answer as a Dask scheduler ({type(exc).__name__}: {exc}). Is it "
            "the scheduler's port (8786 by default), not the dashboard's (8787) or another service?"
        ) from None


def inventory_of(client: Client) -> Inventory:
    """The scheduler's view of the workers, as plain data (sorted by worker name). Workers
    count their own GPUs (``workbench.cluster.gpus``), with or without ``--resources GPU=N``."""
    from workbench.cluster.gpus import register_gpu_detection

    register_gpu_detection(client)
    info = workers_info(client)
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


def _warm_up(dask_worker=None) -> None:
    """Import the heavy libraries once per worker so the first iteration is not slow
    (`worker_setup.warm_up`), and give torch this worker's share of the cores (not all of
    them: workers share a host)."""
    from workbench.cluster.worker_setup import warm_up

    warm_up()
    torch = loaded("torch")
    if torch is not None:
        torch.set_num_threads(max(1, dask_worker.state.nthreads))
