"""Shared by the tests and the doctests in workbench/: runs keep their records in a
temporary run store, never in the repository or the current folder, and it goes at the end."""

import os
import shutil
import tempfile

from workbench.run_store.store import STORE_ENV

_made: list[str] = []


def pytest_configure(config):
    if STORE_ENV not in os.environ:
        _made.append(tempfile.mkdtemp(prefix="workbench-test-runs-"))
        os.environ[STORE_ENV] = _made[-1]


def pytest_unconfigure(config):
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)
