"""Driving a run: the Backend contract every backend implements, the driver (the I/O shell) and
its bookkeeping (a pure state machine), the inline backend, which iteration a lost process
was in, the line a lost worker gets, and the notebook values a stretch reads.

May import every other sub-package of the runtime; the Dask backend (``workbench.cluster``)
and the Trainer build on it.
"""
