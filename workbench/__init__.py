"""workbench: notebook cells become a fragmented dataflow graph that trains RL on Dask.

    >>> import workbench as wb
    >>> fdg = wb.FDG()

In a notebook, ``%load_ext workbench`` adds the ``%%fragment`` and ``%fdg`` magics.
"""
from workbench.context import ReplicaInfo, allreduce, log
from workbench.fdg.errors import (
    ConflictingWritersError,
    FDGError,
    FragmentError,
    FragmentOptionError,
    FragmentRuntimeError,
    FragmentSyntaxError,
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
    Policy,
    SingleLearnerCoarse,
    SingleLearnerFine,
)
from workbench.session import FDG

__version__ = "0.1.0"

__all__ = [
    "FDG", "Policy", "Inline", "SingleLearnerCoarse", "SingleLearnerFine", "MultiLearner", "GPUOnly", "Async",
    "ReplicaInfo", "log", "allreduce",
    "WorkbenchError", "FragmentError", "FragmentSyntaxError", "FragmentOptionError",
    "FDGError", "UndefinedNameError", "ConflictingWritersError", "StepCycleError",
    "PlacementError", "FragmentRuntimeError", "RunConfigError",
]


_LAZY_SUBPACKAGES = ("envs", "kernels", "algorithms", "cluster")


def __getattr__(name):
    # wb.envs.make(...) in a fragment cell works without importing the subpackage first,
    # and `import workbench` stays light.
    if name in _LAZY_SUBPACKAGES:
        import importlib

        return importlib.import_module(f"workbench.{name}")
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def load_ipython_extension(ipython):
    """``%load_ext workbench``: register the ``%%fragment`` and ``%fdg`` magics."""
    from workbench.magics import load_ipython_extension as _load

    _load(ipython)
