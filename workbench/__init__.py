"""workbench: notebook cells become a fragmented dataflow graph that trains RL on Dask.

    >>> import workbench as wb
    >>> fdg = wb.FDG()

In a notebook, ``%load_ext workbench`` adds the ``%%fragment`` and ``%fdg`` magics.
"""

from workbench.context import (
    ReplicaInfo,
    allreduce,
    count_env_steps,
    env_seed,
    env_steps,
    evaluating,
    log,
    render_mode,
    step_elsewhere,
)
from workbench.errors import (
    CheckpointError,
    ConflictingWritersError,
    FDGError,
    FragmentError,
    FragmentOptionError,
    FragmentRuntimeError,
    FragmentSyntaxError,
    MetricError,
    PlacementError,
    RunConfigError,
    StepCycleError,
    UndefinedNameError,
    WorkbenchError,
)
from workbench.fdg.policy import (
    Async,
    GPUOnly,
    Inline,
    MultiLearner,
    Pipelined,
    Policy,
    SingleLearnerCoarse,
    SingleLearnerFine,
)
from workbench.run_store import compare, load_run, runs
from workbench.session import FDG
from workbench.sweep import MedianStopping, SweepResult, sweep

__version__ = "0.1.0"

import dataclasses as _dataclasses
import logging as _logging

# a library's logger stays silent unless the application configures logging; what the user
# must see (a lost worker, a re-placement) is also printed by the run itself
_logging.getLogger("workbench").addHandler(_logging.NullHandler())

__all__ = [
    "FDG",
    "Policy",
    "Inline",
    "SingleLearnerCoarse",
    "SingleLearnerFine",
    "MultiLearner",
    "GPUOnly",
    "Async",
    "Pipelined",
    "placement",
    "runs",
    "load_run",
    "compare",
    "sweep",
    "SweepResult",
    "MedianStopping",
    "ReplicaInfo",
    "log",
    "allreduce",
    "env_steps",
    "count_env_steps",
    "step_elsewhere",
    "evaluating",
    "env_seed",
    "render_mode",
    "WorkbenchError",
    "FragmentError",
    "FragmentSyntaxError",
    "FragmentOptionError",
    "FDGError",
    "UndefinedNameError",
    "ConflictingWritersError",
    "StepCycleError",
    "PlacementError",
    "FragmentRuntimeError",
    "RunConfigError",
    "CheckpointError",
    "MetricError",
]


def placement(fdg, cluster=None, *, steps: int | None = None):
    """The placement board for ``fdg``: drag its fragments onto ``cluster``'s workers and
    devices; ``board.policy`` is the placement, also put on ``fdg.placement``. ``cluster``:
    a ``distributed.Client``, a scheduler address, or None (the notebook's client, else the
    embedded local cluster). ``%fdg place`` does this for the notebook's FDG.

    >>> board = wb.placement(fdg)      # doctest: +SKIP
    >>> board                          # doctest: +SKIP
    >>> board.policy                   # doctest: +SKIP
    Policy('SingleLearnerCoarse', actor+env ×2 on 0, 1 | learner ×1 on 0)

    See :class:`workbench.widgets.placement.PlacementBoard`.
    """
    from workbench.widgets.placement import placement as _placement  # anywidget: only when used

    return _placement(fdg, cluster, steps=steps)


_LAZY_SUBPACKAGES = ("envs", "kernels", "algorithms", "cluster")


def __getattr__(name):
    # wb.envs.make(...) in a fragment cell works without importing the subpackage first,
    # and `import workbench` stays light.
    if name in _LAZY_SUBPACKAGES:
        import importlib

        return importlib.import_module(f"workbench.{name}")
    if name in _ON_REPLICA:  # wb.iteration() for replica.iteration: say where it lives
        raise AttributeError(
            f"module 'workbench' has no attribute {name!r}; in a fragment cell it is "
            f"`replica.{name}` (the `replica` name every cell has: {', '.join(_ON_REPLICA)})"
        )
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


#: what a cell reads from ``replica`` (ReplicaInfo's fields and its iteration), not from ``wb``
_ON_REPLICA = ("iteration", *(f.name for f in _dataclasses.fields(ReplicaInfo)))


def load_ipython_extension(ipython):
    """``%load_ext workbench``: register the ``%%fragment`` and ``%fdg`` magics."""
    from workbench.magics import load_ipython_extension as _load

    _load(ipython)
