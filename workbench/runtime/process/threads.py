"""How many threads a process's compute pools use: torch's intra-op pool and the BLAS pools.

Small RL networks run fastest single-threaded, and a pool larger than the cores left free
(the cluster, other loops) makes its spinning threads fight for them: we measured 40×
slowdowns on a busy 2-core machine. BLAS's pool the same: a 128×64 by 64×64 product (the
NumPy PPO learner's) took 71 µs on two threads of a busy machine and 28 µs on one. Inline
runs and every Dask worker set their pools here.
"""

from __future__ import annotations

import os
from typing import Callable

from workbench.loaded_modules import loaded

__all__ = ["limit_threads", "POOL_VARIABLES"]

#: the variables that size the pools when they start (Dask's nanny sets them to 1 in workers)
POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def limit_threads(count: int = 1, *, pools_started_at_size: bool = False) -> Callable[[], None]:
    """Set torch's intra-op threads (if torch is loaded) and the BLAS pools' (NumPy's matmuls,
    through threadpoolctl) to ``count``; return a function that restores both.

    ``pools_started_at_size``: a fresh process whose :data:`POOL_VARIABLES` all say ``count``
    (a Dask worker: its nanny sets them) started its BLAS pools at that size, so threadpoolctl
    is not asked (it reads every loaded library). Elsewhere a pool may have been resized since.

    >>> restore = limit_threads(1)
    >>> restore()
    """
    count = max(1, int(count))
    torch = loaded("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None and previous != count:
        torch.set_num_threads(count)
    blas = None
    if not (pools_started_at_size and all(os.environ.get(name) == str(count) for name in POOL_VARIABLES)):
        try:
            from threadpoolctl import threadpool_limits

            blas = threadpool_limits(limits=count, user_api="blas")
        except Exception:  # no threadpoolctl, or a BLAS it cannot drive: torch's pool alone
            blas = None

    def restore() -> None:
        if blas is not None:
            blas.restore_original_limits()
        if previous is not None and torch.get_num_threads() != previous:
            torch.set_num_threads(previous)

    return restore
