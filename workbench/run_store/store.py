"""The run store: a folder of finished runs, one sub-folder each, and how to find one.

::

    workbench-runs/
      .workbench-run-store                     marks the folder as a store (JSON: format, version)
      20261207-103800-quickstart-3f2a/         one run (see workbench.run_store.record)
      .tmp-…/                                  a run being written; renamed into place whole

Where: the ``run_store`` option (``--run-store DIR``), else ``$WORKBENCH_RUN_STORE``, else
``./workbench-runs``; ``off`` (or ``False``) keeps no record.

    >>> import tempfile
    >>> store = open_store(tempfile.mkdtemp() + "/runs", create=True)
    >>> is_store(store), run_folders(store)
    (True, [])
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from workbench.errors import WorkbenchError

__all__ = [
    "RunStoreError",
    "RunStoreWarning",
    "STORE_ENV",
    "DEFAULT_STORE",
    "MARKER",
    "store_path",
    "open_store",
    "is_store",
    "run_folders",
    "find_run",
]

#: the environment variable naming the default store (the test suite points it at a temporary folder)
STORE_ENV = "WORKBENCH_RUN_STORE"
#: the store when neither the option nor the environment names one
DEFAULT_STORE = "workbench-runs"
#: the file that makes a folder a run store
MARKER = ".workbench-run-store"
FORMAT = "workbench-run-store"
VERSION = 1

_OFF = ("off", "none")


class RunStoreError(WorkbenchError):
    """A run store or a run in it cannot be read: not a store, no such run, a damaged run."""


class RunStoreWarning(UserWarning):
    """A run folder in a store was skipped (damaged, or half-written by a crash)."""


def store_path(option=None) -> Path | None:
    """The store ``option`` (a ``run_store`` value) means; None when it turns the store off.

    >>> store_path("off") is None, store_path("/tmp/r")
    (True, PosixPath('/tmp/r'))
    """
    if option is False or (isinstance(option, str) and option.strip().lower() in _OFF):
        return None
    if option is None:
        option = os.environ.get(STORE_ENV) or DEFAULT_STORE
        if option.strip().lower() in _OFF:
            return None
    return Path(option).expanduser()


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a run store (it holds the :data:`MARKER` file)."""
    return (Path(path) / MARKER).is_file()


def open_store(path: str | os.PathLike, *, create: bool = False) -> Path:
    """``path`` as a run store: made one (``create``) when missing or empty; a folder that
    holds other things and no :data:`MARKER` is refused, so a run never writes into it."""
    path = Path(path).expanduser()
    if is_store(path):
        return path
    if path.exists() and not path.is_dir():
        raise RunStoreError(
            f"the run store {str(path)!r} is a file, not a folder. Give a folder "
            "(run_store=… / --run-store DIR), or run_store='off' to keep no record."
        )
    if path.is_dir() and any(path.iterdir()):
        raise RunStoreError(
            f"{str(path)!r} is not a run store: it holds other files and no {MARKER} file. "
            "Give an empty or new folder (run_store=… / --run-store DIR), or the store's own "
            f"folder (the one with {MARKER} in it)."
        )
    if not create:
        raise RunStoreError(
            f"no run store at {str(path)!r}: runs write one there as they finish (run_store=…, "
            f"--run-store DIR, ${STORE_ENV}; default ./{DEFAULT_STORE})."
        )
    path.mkdir(parents=True, exist_ok=True)
    marker = path / f".{MARKER}.{os.getpid()}"
    marker.write_text(json.dumps({"format": FORMAT, "version": VERSION}))
    os.replace(marker, path / MARKER)
    return path


def run_folders(store: Path) -> list[Path]:
    """The run folders of ``store``, oldest first (ids start with the time they started);
    half-written ones (``.tmp-…``) are not runs yet."""
    return sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))


def find_run(store: Path, run_id: str) -> Path:
    """The folder of run ``run_id`` in ``store``: its whole id or a prefix or part that only
    it has. Unknown: a :class:`RunStoreError` naming the closest ids."""
    folders = {p.name: p for p in run_folders(store)}
    if run_id in folders:
        return folders[run_id]
    partial = [name for name in folders if name.startswith(run_id)] or [name for name in folders if run_id in name]
    if len(partial) == 1:
        return folders[partial[0]]
    if len(partial) > 1:
        raise RunStoreError(
            f"{run_id!r} names {len(partial)} runs in {str(store)!r}: "
            f"{', '.join(partial[:8])}{' …' if len(partial) > 8 else ''}. Give more of the id."
        )
    close = difflib.get_close_matches(run_id, list(folders), n=5, cutoff=0.4)
    hint = (
        f" Closest: {', '.join(close)}."
        if close
        else (f" It holds {len(folders)} runs; wb.runs() lists them." if folders else " It holds no runs yet.")
    )
    raise RunStoreError(f"no run {run_id!r} in the run store {str(store)!r}.{hint}")
