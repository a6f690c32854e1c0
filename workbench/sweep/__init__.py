"""Sweeps: one FDG run as many trials (settings × seeds) concurrently on one Dask cluster.

Owns the trial grid, the median-stopping rule and the sweep's table (pure, tested without
I/O), the trial as a Dask task (the whole run under the inline policy in one worker process,
checkpointed so a lost worker's trial goes on elsewhere), the runner, its live views and
the result. Imports the session (``wb.FDG``), the cluster's ``connect``, the run state's
checkpoints, config and errors; ``workbench.cli``, ``workbench.magics`` and ``workbench``
import it. See docs/sweeps.md.

    >>> result = wb.sweep(fdg, {"cfg.learning_rate": [1e-3, 3e-3]}, seeds=10)   # doctest: +SKIP
"""

from workbench.sweep.grid import Trial, trial_grid
from workbench.sweep.result import SweepResult
from workbench.sweep.runner import SweepControl, sweep
from workbench.sweep.stopping import MedianStopping

__all__ = ["sweep", "SweepResult", "SweepControl", "MedianStopping", "Trial", "trial_grid"]
