"""workbench's benchmarks: measurements of workbench against itself, its peers and older revisions.

Owns the benchmark scripts (``bench_*.py``, ``device_check*.py``, ``soak.py``, …) and their one
shared harness, :mod:`benchmarks.harness` (timing, steady rates, peers side by side, tables,
JSON, the common options). A benchmark may import workbench and the harness; workbench never
imports a benchmark, and this package is not installed with it: run a benchmark from a checkout,

    python -m benchmarks                     # the benchmarks, one line each
    python -m benchmarks bench_quickstart --seeds 1 2
    python -m benchmarks.bench_quickstart --seeds 1 2

Measurements and what they mean are in docs/performance.md and the docs each benchmark names.
"""
