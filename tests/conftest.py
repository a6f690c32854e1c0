"""Shared fixtures: a real LocalCluster on loopback, and small FDGs that exercise every
interface kind without torch."""

from __future__ import annotations

import contextlib
import logging

import pytest

import workbench as wb


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_python():
    """The Ctrl-C tests simulate it with ``_thread.interrupt_main``, which does nothing while
    SIGINT is ignored — and a non-interactive shell ignores SIGINT in what it starts in the
    background (``bash -c 'bash .ci/run &'``), which Python then keeps. Python's own
    handler for the session, as in a terminal or a kernel being interrupted."""
    import signal

    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def two_worker_client(silence_logs: int = logging.ERROR, **cluster_options):
    """A Client of a 2-worker LocalCluster on 127.0.0.1 (the shape of the embedded default);
    ``cluster_options`` go to the cluster (``env=``, ``preload=``…).

    Example::

        with two_worker_client(env={"CUDA_VISIBLE_DEVICES": ""}) as client: ...
    """
    from distributed import Client

    from workbench.cluster.restart_tolerant import PatientLocalCluster

    with PatientLocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=silence_logs,
        **cluster_options,
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


@pytest.fixture(scope="session")
def client():
    """A 2-worker LocalCluster on 127.0.0.1 (the shape of the embedded default)."""
    with two_worker_client() as c:
        yield c


@pytest.fixture()
def doomed_cluster():
    """Its own 2-worker cluster: a test kills one of the worker processes (the nanny then
    starts a new one, which joins later)."""
    with two_worker_client(silence_logs=logging.CRITICAL) as c:
        yield c


#: notebook cells of a small loop whose values gather across replicas (arrays along the batch axis)
LOOP_CELLS = (
    "%%fragment env --init\nobs = np.zeros(2)\n",
    "%%fragment actor\naction = obs + 1\n",
    "%%fragment env\nobs = action * 0.5\nreward = action.copy()\n",
    "%%fragment learner\nseen = reward.shape[0]\nwb.log('T', seen)\n",
)


@pytest.fixture
def ip():
    """A real IPython InteractiveShell with ``%load_ext workbench`` and an empty FDG (no last
    run, no board placement); emptied again afterwards, any placement board closed."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    shell.run_cell("import numpy as np\nimport workbench as wb")
    magics = shell.magics_manager.registry["WorkbenchMagics"]

    def empty() -> None:
        magics.fdg.clear()
        magics.fdg.last_run, magics.fdg.placement, magics.fdg.placement_steps = None, None, None

    empty()
    yield shell
    if getattr(magics, "_board", None) is not None:
        magics._board.close()
        magics._board = None
    empty()


def assert_notebook_is_the_module(notebook, module) -> tuple[wb.FDG, dict]:
    """A shipped notebook's fragment cells are the algorithm module's FRAGMENT_CELLS, byte for
    byte, and build the same FDG. Returns the notebook's FDG and its %fdg run options."""
    import nbformat

    from workbench.notebook import load_notebook

    nb = nbformat.read(notebook, as_version=4)
    fragment_cells = [c.source for c in nb.cells if c.source.startswith("%%fragment")]
    assert fragment_cells == [f"{line}\n{body}" for line, body in module.FRAGMENT_CELLS]
    fdg, options = load_notebook(notebook)
    assert fdg == module.build_fdg()
    return fdg, options


def toy_fdg(**namespace) -> wb.FDG:
    """A torch-free loop with every interface kind (``workbench.algorithms.counters``): a
    per-step ring carried by an init value, stacked step→iteration data, a latest value
    broadcast back, and wb.log metrics. Each env replica holds 3 counters; the 'learner'
    sums what it saw."""
    from workbench.algorithms import counters

    return counters.build_fdg(**namespace)


@contextlib.contextmanager
def tls_local_cluster():
    """A 2-worker LocalCluster on 127.0.0.1 that speaks TLS only (temporary certificates)."""
    pytest.importorskip("cryptography")
    from distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        security=security,
        silence_logs=logging.ERROR,
    ) as cluster:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        yield cluster
