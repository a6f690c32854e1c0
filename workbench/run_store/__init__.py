"""Runs kept, listed, loaded and compared: the run store.

Every ``fdg.run`` / ``workbench run`` ends by writing its record — config, per-iteration
metrics, events, a summary and its final checkpoint — as a folder of the run store
(``run_store``/``--run-store DIR``; default ``$WORKBENCH_RUN_STORE``, else
``./workbench-runs``; ``off`` for none). Then::

    wb.runs()                          # a DataFrame, one row per run
    run = wb.load_run("20261207-1038") # a Run again (metrics, events, state)
    wb.compare(by="cfg.lr")            # IQM curves with stratified-bootstrap CIs

Modules: :mod:`~workbench.run_store.store` (the folder, finding a run), :mod:`~workbench.run_store.record`
(one run's folder: write and read), :mod:`~workbench.run_store.keeper` (what ``fdg.run`` calls),
:mod:`~workbench.run_store.listing` (``runs``, ``load_run``), :mod:`~workbench.run_store.stats` (IQM,
stratified bootstrap), :mod:`~workbench.run_store.compare` (the plot). It imports the run state,
the config and the FDG model below it; the session, the dashboard and ``wb`` import it.
See docs/runs.md. (``wb.runs`` is the listing function, which shadows this package's name
on ``workbench``: import its names with ``from workbench.run_store import …``.)
"""

from workbench.run_store.compare import Comparison, compare, curves
from workbench.run_store.keeper import RunKeeper
from workbench.run_store.listing import load_run, runs
from workbench.run_store.record import StoredRun, notebook_config, read_run, write_run
from workbench.run_store.stats import iqm, stratified_bootstrap_ci
from workbench.run_store.store import RunStoreError, RunStoreWarning, find_run, open_store, store_path

__all__ = [
    "runs",
    "load_run",
    "compare",
    "Comparison",
    "curves",
    "iqm",
    "stratified_bootstrap_ci",
    "write_run",
    "read_run",
    "notebook_config",
    "StoredRun",
    "RunKeeper",
    "RunStoreError",
    "RunStoreWarning",
    "open_store",
    "store_path",
    "find_run",
]
