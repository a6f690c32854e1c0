"""The live tests' shared fixture: a real ipykernel per test module (tests/live/kernel.py)."""

from __future__ import annotations

import pytest

from .kernel import Kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    try:
        yield k
    finally:
        k.close()
