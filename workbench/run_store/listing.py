"""Reading a run store: :func:`runs` lists it as a DataFrame, :func:`load_run` gives one run back.

>>> import workbench as wb
>>> wb.runs()                                   # doctest: +SKIP
                      id                   started        name  policy  seed  status  solved ...
>>> run = wb.load_run("20261207-103800-quick")  # doctest: +SKIP
>>> fdg.run(resume=run.checkpoint_path, policy="coarse")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from workbench.run_store.record import StoredRun, read_run, read_summary
from workbench.run_store.store import RunStoreError, RunStoreWarning, open_store, run_folders, store_path, find_run

__all__ = ["runs", "load_run", "LISTED", "resolve_store"]

#: the summary fields ``runs()`` shows, in its column order (then the notebook's settings)
LISTED = (
    "id",
    "started",
    "name",
    "policy",
    "seed",
    "status",
    "solved",
    "iterations",
    "env_steps",
    "final_return",
    "best_return",
    "wall_s",
)


def resolve_store(store=None) -> Path:
    """The store to read: ``store``, else ``$WORKBENCH_RUN_STORE``, else ./workbench-runs."""
    path = store_path(store)
    if path is None:
        raise RunStoreError(
            "the run store is off (run_store='off' or $WORKBENCH_RUN_STORE=off): name one to read, "
            "e.g. wb.runs('workbench-runs')."
        )
    return path


def runs(store=None):
    """Every run in the run store as a pandas DataFrame, one row each, oldest first: id,
    started, name, policy, seed, status, solved, iterations, env steps, final and best
    return (mean of the last ``window`` episodes), wall seconds, then the notebook's
    settings (``cfg.lr``…) and the run's folder (``path``). A damaged run folder is
    skipped with a :class:`~workbench.run_store.store.RunStoreWarning`. The default store, not
    made yet, lists no runs; ``store`` names another (a folder that is not a store is an error)."""
    import pandas as pd

    explicit = store is not None
    path = resolve_store(store)
    if not explicit and not path.exists():
        return pd.DataFrame(columns=[*LISTED, "path"])
    store = open_store(path)
    rows = []
    for folder in run_folders(store):
        try:
            info = read_summary(folder)
            config = read_run_config(folder)
        except RunStoreError as exc:
            warnings.warn(f"skipped {folder.name}: {exc}", RunStoreWarning, stacklevel=2)
            continue
        row = {key: info.get(key) for key in LISTED}
        row["id"] = info.get("id") or folder.name
        row.update(config.get("notebook") or {})
        row["path"] = str(folder)
        rows.append((info.get("started_unix") or 0.0, row["id"], row))
    rows = [row for *_, row in sorted(rows, key=lambda item: (item[0], item[1]))]
    settings = dict.fromkeys(k for r in rows for k in r if k not in LISTED and k != "path")
    table = pd.DataFrame(rows, columns=[*LISTED, *settings, "path"])
    if len(table):
        table["started"] = pd.to_datetime(table["started"], utc=True)
    return table


def read_run_config(folder: Path) -> dict:
    """A run folder's config.json (``{}`` for a run written without one)."""
    import json

    file = folder / "config.json"
    if not file.exists():
        return {}
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunStoreError(f"{str(file)!r} is damaged ({exc}).") from None
    if not isinstance(config, dict):
        raise RunStoreError(f"{str(file)!r} is damaged (not a JSON object).")
    return config


def load_run(run, *, store=None, state: bool = True, namespace=None) -> StoredRun:
    """A kept run as a :class:`~workbench.run_store.record.StoredRun` (a ``Run``: metrics,
    returns, events, config, status; with ``state``, its final state and policy from its
    checkpoint). ``run``: a run folder's path, or an id in ``store`` (its whole id, or a
    part only it has); an unknown id names the closest ones. A row of ``wb.runs()`` works too.
    ``namespace``: what its cells read from the notebook (``globals()``), for its ``fdg``."""
    if hasattr(run, "get") and not isinstance(run, (str, os.PathLike)):  # a row of wb.runs()
        run = Path(run["path"]) if run.get("path") else run.get("id")
    if not isinstance(run, (str, os.PathLike)):
        raise RunStoreError(f"load_run takes a run's id or folder, not {type(run).__name__}.")
    folder = Path(run).expanduser()
    if not (folder.is_dir() and (folder / "summary.json").exists()):
        if isinstance(run, os.PathLike) or os.sep in str(run):
            if not folder.exists():
                raise RunStoreError(f"no run folder {str(folder)!r}.")
            raise RunStoreError(f"{str(folder)!r} is not a run's folder (no summary.json).")
        folder = find_run(open_store(resolve_store(store)), str(run))
    return read_run(folder, state=state, namespace=namespace)
