"""Profiling a run: where each iteration's time went, an offline HTML report, metric loggers.

    run = fdg.run(...)
    run.profile()                 # per fragment / group replica: compute, wait, send, bytes
    run.profile_by_iteration()    # per iteration × group replica, with the iteration's wall time
    run.report("profile.html")    # self-contained HTML (bokeh inline, no network)
    fdg.run(..., loggers=[CSVLogger("metrics.csv"), TensorBoardLogger("runs/ppo")])

See docs/profiling.md.
"""

from workbench.profiling.accounting import profile, profile_by_iteration
from workbench.profiling.loggers import CSVLogger, TensorBoardLogger, tensorboard_available
from workbench.profiling.report import write_report
from workbench.profiling.trackers import MLflowLogger, WandbLogger, mlflow_available, wandb_available

__all__ = [
    "profile",
    "profile_by_iteration",
    "write_report",
    "CSVLogger",
    "TensorBoardLogger",
    "tensorboard_available",
    "MLflowLogger",
    "WandbLogger",
    "mlflow_available",
    "wandb_available",
]
