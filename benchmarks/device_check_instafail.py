"""A pytest plugin for the device check's ``tests`` part: each failure's traceback printed
the moment the test fails, not in the summary at the end.

Why: a device call has a time limit, and a part cut at it never reaches pytest's summary. On
the H200 (2026-11-27) the part was cut at 260 s with 3 tests failed, and nothing said why.

Example (what part_tests runs, from the checkout or with it on ``PYTHONPATH``)::

    python -m pytest -p benchmarks.device_check_instafail -m gpu tests/gpu
"""

from __future__ import annotations


def pytest_runtest_logreport(report) -> None:
    if report.failed:
        print(f"\nFAILED AT ONCE {report.nodeid} ({report.when})\n{report.longreprtext}\n", flush=True)
