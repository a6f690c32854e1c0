"""What ``fdg.run`` does with the run store: :class:`RunKeeper`.

Made as a run starts (before anything trains), it finds the store the run's ``run_store``
option names (a folder that is not a store refuses the run then, not after an hour of
training) and takes the notebook's settings as they are at the start. At the end,
:meth:`RunKeeper.keep` writes the run's folder — a finished, stopped or failed run alike —
and never raises: a full disk costs the record, not the run.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from workbench.run_store.record import notebook_config, write_run
from workbench.run_store.store import open_store, store_path

__all__ = ["RunKeeper", "run_name"]

#: where a notebook's or script's path is in its namespace: JupyterLab/Notebook 7, VS Code, a script
_PATH_NAMES = ("__session__", "__vsc_ipynb_file__", "__file__")


def run_name(namespace) -> str | None:
    """The name of the notebook or script a namespace belongs to, from the path its
    front end puts there; None when it has none.

    >>> run_name({"__session__": "/home/me/ppo-cartpole.ipynb"}), run_name({})
    ('ppo-cartpole', None)
    """
    for key in _PATH_NAMES:
        value = (namespace or {}).get(key)
        if isinstance(value, (str, os.PathLike)) and str(value):
            return Path(value).stem
    return None


class RunKeeper:
    """Keeps one run in the run store its config names (or in none: ``run_store="off"``)."""

    def __init__(self, config, fdg, namespace) -> None:
        path = store_path(getattr(config, "run_store", None))
        self.store: Path | None = open_store(path, create=True) if path is not None else None
        self.config = config
        self.name = getattr(config, "run_name", None) or run_name(namespace) or "fdg"
        self.notebook: dict[str, Any] = notebook_config(fdg, namespace) if self.store is not None else {}
        #: the kept run's folder, and how long writing it took (seconds)
        self.folder: Path | None = None
        self.seconds = 0.0

    def keep(self, run) -> Path | None:
        """Write ``run``'s folder; return it (None: no store, no run, or writing failed,
        which is logged and said, never raised)."""
        if self.store is None or run is None:
            return None
        began = time.perf_counter()
        try:
            self.folder = write_run(run, self.store, config=self.config, notebook=self.notebook, name=self.name)
        except Exception as exc:  # noqa: BLE001 - the record is lost, the run is not
            message = f"the run's record was not kept in the run store {str(self.store)!r}: {exc}"
            logging.getLogger("workbench").warning(message)
            print(f"workbench: {message}", flush=True)
        self.seconds = time.perf_counter() - began
        return self.folder
