"""Every exception workbench raises on purpose, in one place.

Each says what was wrong, where (fragment, cell line, replica, worker, file), and what to
do. They are plain Python exceptions: only ``workbench.magics`` turns them into IPython
``UsageError``s, so scripts and tests see the same types a notebook does.

The FDG's own errors (bad cells, bad graphs, policies that do not fit) are defined in the
pure layer, :mod:`workbench.fdg.errors`, and re-exported here; the errors of running a
graph are defined here.

Example:
    >>> from workbench.errors import RunConfigError, WorkbenchError
    >>> issubclass(RunConfigError, WorkbenchError)
    True
"""

from __future__ import annotations

from workbench.fdg.errors import (
    ConflictingWritersError,
    FDGError,
    FragmentError,
    FragmentOptionError,
    FragmentSyntaxError,
    PlacementError,
    StepCycleError,
    UndefinedNameError,
    WorkbenchError,
)

__all__ = [
    "WorkbenchError",
    "FragmentError",
    "FragmentSyntaxError",
    "FragmentOptionError",
    "FDGError",
    "UndefinedNameError",
    "ConflictingWritersError",
    "StepCycleError",
    "PlacementError",
    "RunConfigError",
    "MetricError",
    "CheckpointError",
    "WorkerLostError",
    "WorkerUnreachableError",
    "SchedulerLostError",
    "FragmentRuntimeError",
    "CellNotReturningError",
    "ProcessGroupError",
]


class RunConfigError(WorkbenchError):
    """A run was asked for with bad settings (iterations, steps, cluster address…)."""


class MetricError(WorkbenchError, ValueError):
    """``wb.log`` was given a value that is not a finite number (NaN, ±inf, or not a number
    at all). Raised inside the fragment, so the run's error names its cell line."""


class CheckpointError(WorkbenchError):
    """A checkpoint cannot be written, read, or resumed from by this FDG."""


class WorkerLostError(WorkbenchError):
    """Workers holding replicas of a run left the cluster mid-run (a process died, a
    machine went away). The run re-places their fragments and continues from
    ``state`` (the latest complete snapshot, possibly None)."""

    def __init__(self, workers: list[str], state=None, iteration: int | None = None):
        names = ", ".join(workers)
        super().__init__(
            f"worker{'s' if len(workers) > 1 else ''} {names} left the cluster mid-run"
            + (f" (at iteration {iteration})" if iteration is not None else "")
        )
        self.workers, self.state, self.iteration = list(workers), state, iteration


class WorkerUnreachableError(WorkerLostError):
    """Workers holding replicas stopped answering mid-run while their processes may still
    live (a link down, a partition, a frozen process): unheard by the scheduler, their
    replicas' channels silent to a probe and their nannies not seeing them compute; retired
    from the scheduler so they cannot rejoin the run half-way. Handled as a lost worker:
    re-placed from the latest snapshot."""

    def __init__(self, workers: list[str], silent_seconds: float, state=None, iteration: int | None = None):
        super().__init__(workers, state, iteration)
        names = ", ".join(workers)
        self.args = (
            f"worker{'s' if len(workers) > 1 else ''} {names} stopped answering mid-run (not heard "
            f"from for {silent_seconds:.1f} s, and a probe of its replicas' channels got no "
            "reply); retired from the cluster",
        )
        #: seconds from the workers' last word to the decision that they are lost
        self.silent_seconds = silent_seconds


class SchedulerLostError(WorkbenchError):
    """This notebook's client lost the Dask scheduler mid-run (its process died, or the
    link to it broke): the run's tasks were cancelled with it, so the run stops. Names the
    scheduler's address and the iteration; :meth:`checkpoints_in` adds what a resume can
    start from."""

    def __init__(self, address: str, iteration: int):
        self.address, self.iteration = address, iteration
        self.newest: str | None = None
        super().__init__(self._text(None, None))

    def _text(self, directory, newest) -> str:
        head = (
            f"the Dask scheduler at {self.address} was lost at iteration {self.iteration}: this "
            "notebook's connection to it broke (the scheduler process died or cannot be reached), "
            "and every task of the run was cancelled with it. The run stopped."
        )
        if directory is None:
            return (
                f"{head} This run wrote no checkpoints (pass checkpoint_dir=…: one every 5-10 s "
                "of training, or every checkpoint_every=N iterations, to resume from). Restart the "
                "scheduler and its workers, and run again."
            )
        if newest is None:
            return (
                f"{head} No checkpoint was written to {directory} yet. Restart the scheduler and its "
                "workers, and run again."
            )
        return (
            f"{head} The checkpoints written so far are intact (newest: {newest}). Restart the "
            f"scheduler and its workers, then resume: fdg.run(resume={str(directory)!r}, …) "
            f"(%fdg run --resume {directory}, workbench run NB --resume {directory})."
        )

    def checkpoints_in(self, directory, newest) -> "SchedulerLostError":
        """Say what a resume can start from: ``newest``, the newest loadable checkpoint in
        ``directory`` (None: none yet; ``directory`` None: the run wrote none)."""
        self.newest = None if newest is None else str(newest)
        self.args = (self._text(directory, self.newest),)
        return self


class ProcessDiedError(WorkbenchError):
    """A worker process holding the same fragments died twice at the same iteration: what
    they run kills it (native crash, os._exit off the cell's thread, memory), so the run
    stops instead of re-placing them again."""


class NotebookCellError(WorkbenchError):
    """An ordinary notebook cell that a headless run needs (``workbench run``) raised."""


def on_worker(worker: str) -> str:
    """A Dask worker's name as messages say it: ``worker 1``; ``local`` (the calling
    process, where inline runs) as it is.

    >>> on_worker("1"), on_worker("local")
    ('worker 1', 'local')
    """
    return worker if worker == "local" else f"worker {worker}"


class FragmentRuntimeError(WorkbenchError):
    """A fragment raised while running. Names the fragment, replica, worker and cell line,
    and carries the original traceback text."""

    def __init__(
        self,
        *,
        fragment: str,
        rate: str,
        replica: int,
        worker: str,
        line: int | None,
        source_line: str | None,
        error: str,
        traceback_text: str,
        iteration: int | None = None,
        advice: str | None = None,
    ):
        where = f"cell line {line}" if line else "its cell"
        # the caller passes other advice where the cell need not be wrong (a workbench error
        # raised through it, e.g. a process group that could not form, says what to do itself)
        advice = advice or "Fix the cell, re-run it, and run again."
        at_iter = f" in iteration {iteration}" if iteration is not None else ""
        code = f"\n    {source_line.strip()}" if source_line else ""
        super().__init__(
            f"fragment {fragment!r} ({rate} cell), replica {replica} on {on_worker(worker)}, raised{at_iter} "
            f"at {where}:{code}\n{error}\n"
            f"The run stopped cleanly; the FDG is intact. {advice}\n"
            f"--- original traceback ---\n{traceback_text}"
        )
        self.fragment, self.rate, self.replica, self.worker = fragment, rate, replica, worker
        self.line, self.error, self.traceback_text = line, error, traceback_text
        self.iteration = iteration
        self._kwargs = dict(
            fragment=fragment,
            rate=rate,
            replica=replica,
            worker=worker,
            line=line,
            source_line=source_line,
            error=error,
            traceback_text=traceback_text,
            iteration=iteration,
            advice=advice,
        )

    def __reduce__(self):  # survive pickling from a Dask worker with every field
        return (_rebuild_runtime_error, (self._kwargs,))


def _rebuild_runtime_error(kwargs: dict) -> FragmentRuntimeError:
    return FragmentRuntimeError(**kwargs)


class CellNotReturningError(WorkbenchError):
    """A stop was asked for and a cell has not returned within the grace period (an
    endless loop, a blocking call). Names the cells; the run ends without them."""

    def __init__(self, cells: list[str], grace: float):
        said = "; ".join(cells) if cells else "a replica's cell has not returned"
        super().__init__(
            f"{said} — {grace:g} s after the stop. The run is stopped without it: "
            "a worker running it is restarted; a thread in this process is ended, or, where "
            "it cannot be, named with what to do. Fix the cell so it returns, and run again."
        )
        self.cells = list(cells)


class ProcessGroupError(WorkbenchError):
    """``wb.allreduce`` over torch.distributed could not form its process group, or the
    group broke while no worker was lost (``workbench.runtime.transport.process_group``). Names the
    learner replicas and their workers; the channels' all-reduce (``allreduce="channels"``)
    does without one."""
