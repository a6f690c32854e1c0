"""``wb.sweep``: every trial of a grid of settings × seeds, run concurrently on one Dask cluster.

Each trial is one Dask task that runs the whole training under the inline policy in its
worker process (:mod:`workbench.sweep.dask_trials`), ``trials_at_once`` of them at a time
(default: every worker thread of the cluster). The notebook's cells and values are shipped
to the workers once. As trials report, the table (:class:`~workbench.sweep.table.SweepTable`)
changes and its view redraws; a rule such as :class:`~workbench.sweep.stopping.MedianStopping`
stops trials behind the others. Ctrl-C (or :meth:`SweepControl.stop`) stops the running
trials at their next iteration boundary and keeps every trial that finished.
"""

from __future__ import annotations

import collections
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from workbench.config import RunConfig
from workbench.errors import RunConfigError
from workbench.session import FDG
from workbench.sweep.grid import Trial, trial_grid
from workbench.sweep.result import SweepResult
from workbench.sweep.settings import check_settings
from workbench.sweep.stopping import MedianStopping
from workbench.sweep.table import SweepTable
from workbench.sweep.trial import Notebook, TrialSpec
from workbench.sweep.views import make_view

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["sweep", "SweepControl"]

#: run options a sweep decides itself, per trial
_SWEEP_OWNS = ("policy", "cluster", "resume", "checkpoint_dir", "checkpoint_every", "loggers")


class SweepControl:
    """A handle on a running sweep: ``stop()`` from another thread (``%fdg stop``)."""

    def __init__(self) -> None:
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stop_asked(self) -> bool:
        return self._stop.is_set()


def sweep(
    fdg: FDG,
    over: Mapping[str, Iterable[Any]] | None = None,
    *,
    seeds: int | Iterable[int] = 10,
    trials_at_once: int | None = None,
    policy: str = "inline",
    early_stop: MedianStopping | None = None,
    seed_key: str = "cfg.seed",
    cluster: Any = None,
    checkpoint_dir: str | None = None,
    checkpoint_every: int | None = None,
    namespace: Mapping[str, Any] | None = None,
    progress: Any = True,
    control: SweepControl | None = None,
    **options,
) -> SweepResult:
    """Run ``fdg`` once per combination of ``over``'s values and seed; return the
    :class:`~workbench.sweep.result.SweepResult` (``.table`` is a DataFrame, a row a trial).

    - ``over``: ``{"cfg.learning_rate": [1e-3, 3e-3], …}``, fields of notebook objects;
    - ``seeds``: N (seeds 1..N) or a list, set on ``seed_key`` (``cfg.seed``);
    - ``trials_at_once``: trials running together (default: the cluster's worker threads);
    - ``policy``: how each trial runs: ``"inline"``, the whole training in one worker process;
    - ``early_stop``: a rule such as ``MedianStopping()`` (default: every trial runs to its end);
    - ``cluster``: as ``fdg.run``'s (default: the notebook's client, else the embedded cluster);
    - ``checkpoint_dir``: where trials checkpoint, so that one whose worker is lost goes on
      from there (default: a temporary directory, fine for workers on this machine; a user's
      cluster on other hosts needs a directory every worker sees); ``checkpoint_every``:
      iterations between checkpoints (default: the run's own pacing, every 5-10 s);
    - ``progress``: True (a live table: HTML in a notebook, text elsewhere), False, or a
      factory ``(table) -> view`` with ``update(table)`` and ``close(table)``;
    - ``options``: each trial's run options (``iterations``, ``steps``, ``target_return``, …).

    >>> result = wb.sweep(fdg, {"cfg.learning_rate": [1e-3, 3e-3]}, seeds=5,
    ...                   iterations=400, steps=16, target_return=475)   # doctest: +SKIP
    >>> result.table.groupby("learning_rate").solved_iteration.median()   # doctest: +SKIP
    """
    if not isinstance(fdg, FDG):
        raise RunConfigError(
            f"sweep takes a wb.FDG (a notebook's FDG, or one a script builds), not {type(fdg).__name__}."
        )
    owned = sorted(set(options) & set(_SWEEP_OWNS))
    if owned:
        raise RunConfigError(
            f"sweep decides {', '.join(owned)} for each trial itself; give the sweep's own "
            "arguments instead (policy=, cluster=, checkpoint_dir=, checkpoint_every=, progress=)."
        )
    config = RunConfig.from_options(options)  # each trial's options, checked once here
    if policy != "inline":
        raise RunConfigError(
            f"sweep runs each trial as one Dask task under the inline policy (many short trials "
            f"fill a cluster best that way); policy={policy!r} is not supported for sweeps yet. "
            "Run one placed run with fdg.run(policy=...) instead."
        )
    if early_stop is not None and not isinstance(early_stop, MedianStopping):
        raise RunConfigError(f"early_stop must be None or a MedianStopping(...), not {type(early_stop).__name__}.")
    if trials_at_once is not None and (
        not isinstance(trials_at_once, int) or isinstance(trials_at_once, bool) or trials_at_once < 1
    ):
        raise RunConfigError(f"trials_at_once must be a whole number ≥ 1, got {trials_at_once!r}.")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
        raise RunConfigError(f"checkpoint_every must be a whole number ≥ 1, got {checkpoint_every!r}.")
    over = dict(over or {})
    trials = trial_grid(over, seeds)
    namespace = dict(namespace if namespace is not None else fdg.namespace or {})
    if seed_key in over:
        raise RunConfigError(f"sweep over {seed_key!r}: seeds are given with seeds=, which sets {seed_key}.")
    check_settings(namespace, {**over, seed_key: [t.seed for t in trials]})
    fdg.validate(namespace)
    needed = set(fdg.notebook_names()) | {key.partition(".")[0] for key in [*over, seed_key]}
    notebook = Notebook(list(fdg.fragments.values()), {n: namespace[n] for n in needed if n in namespace})
    run_options = {"iterations": config.iterations, "steps": config.steps, **options}
    if "run_store" in RunConfig.__dataclass_fields__:
        run_options.setdefault("run_store", False)  # a record per trial only when asked: run_store=DIR
    with _checkpoint_root(checkpoint_dir) as root:
        spec = TrialSpec(
            options=run_options, seed_key=seed_key, checkpoint_root=root, checkpoint_every=checkpoint_every
        )
        return _Sweep(trials, notebook, spec, config.iterations, early_stop, progress, control or SweepControl()).run(
            cluster, trials_at_once
        )


class _checkpoint_root:
    """The sweep's checkpoint directory: the one given, or a temporary one removed after."""

    def __init__(self, given: str | None) -> None:
        if given is not None:
            RunConfig(checkpoint_dir=given)  # writable, not a file: said as the run says it
        self.given = given
        self.temporary: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> str:
        if self.given is not None:
            os.makedirs(self.given, exist_ok=True)
            return os.path.abspath(self.given)
        self.temporary = tempfile.TemporaryDirectory(prefix="workbench-sweep-")
        return self.temporary.name

    def __exit__(self, *exc) -> None:
        if self.temporary is not None:
            self.temporary.cleanup()


class _Sweep:
    """One sweep's loop in the calling thread: submit, read events, stop, collect."""

    def __init__(
        self,
        trials: list[Trial],
        notebook: Notebook,
        spec: TrialSpec,
        iterations: int,
        early_stop: MedianStopping | None,
        progress: Any,
        control: SweepControl,
    ) -> None:
        self.trials, self.notebook, self.spec = trials, notebook, spec
        self.early_stop, self.control = early_stop, control
        self.id = uuid.uuid4().hex[:10]
        self.table = SweepTable(trials, iterations)
        self.view = make_view(progress, self.table)
        self.events: collections.deque = collections.deque()
        self.asked: set[int] = set()
        #: futures of trials that ended, put there by Dask's callbacks
        self.done: queue.Queue = queue.Queue()

    def run(self, cluster, trials_at_once: int | None) -> SweepResult:
        from workbench.cluster.connect import connect

        handle = connect(cluster, quiet=True)
        try:
            return self._run_on(handle.client, trials_at_once)
        finally:
            if handle.owned and handle.cluster is None:
                handle.close()  # a client opened for an address; the embedded cluster stays

    def _run_on(self, client: "Client", trials_at_once: int | None) -> SweepResult:
        from distributed import Variable

        from workbench.cluster.connect import inventory_of
        from workbench.cluster.worker_setup import ensure_worker_setup
        from workbench.sweep.dask_trials import stop_variable_of, topic_of, trial_task

        inventory = inventory_of(client)
        slots = sum(w.nthreads for w in inventory.workers)
        if slots == 0:
            raise RunConfigError("the cluster has no workers: start some (dask worker ADDRESS) and sweep again.")
        if trials_at_once is None:
            trials_at_once = slots
        elif trials_at_once > slots:
            raise RunConfigError(
                f"trials_at_once={trials_at_once}, and the cluster holds {slots} trial"
                f"{'s' if slots != 1 else ''} at once ({len(inventory.workers)} worker"
                f"{'s' if len(inventory.workers) != 1 else ''}, {slots} thread"
                f"{'s' if slots != 1 else ''}: a trial each). Lower it, or start more workers."
            )
        ensure_worker_setup(client)  # torch imported and threads limited before the first trial, not in it
        stops = Variable(stop_variable_of(self.id), client=client)
        stops.set([])
        topic = topic_of(self.id)
        client.subscribe_topic(topic, lambda event: self.events.append(event[1]))
        [shipped] = client.scatter([self.notebook], broadcast=True, hash=False)
        pending = collections.deque(self.trials)
        running: dict[Any, Trial] = {}
        started = time.perf_counter()
        interrupted = False
        try:
            while pending or running:
                while pending and len(running) < trials_at_once and not self.control.stop_asked:
                    trial = pending.popleft()
                    future = client.submit(
                        trial_task,
                        shipped,
                        trial,
                        self.spec,
                        self.id,
                        pure=False,
                        key=f"workbench-sweep-trial-{trial.index}-{self.id}",
                    )
                    running[future] = trial
                    future.add_done_callback(self.done.put)
                if self.control.stop_asked:
                    pending.clear()
                    stops.set(["all"])
                self._wait_some(running)
                self._decide_stops(stops)
                self.view.update(self.table)
        except KeyboardInterrupt:
            interrupted = True
            self.control.stop()
            pending.clear()
            stops.set(["all"])
            self._finish_after_stop(running)
        finally:
            client.unsubscribe_topic(topic)
            shipped.release()
            stops.delete()
        interrupted = interrupted or self.control.stop_asked
        self._drain()
        self.view.close(self.table)
        return SweepResult(self.table, wall_s=time.perf_counter() - started, interrupted=interrupted)

    def _wait_some(self, running: dict, timeout: float = 0.2) -> None:
        """Collect the trials that ended within ``timeout`` (their futures land on ``self.done``)."""
        try:
            ended = [self.done.get(timeout=timeout)]
        except queue.Empty:
            ended = []
        while not self.done.empty():
            ended.append(self.done.get_nowait())
        self._drain()
        for future in ended:
            if future in running:
                self._collect(future, running.pop(future))

    def _collect(self, future, trial: Trial) -> None:
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 - a trial's task that died (its workers lost too often)
            result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "iterations": 0}
        self._drain()  # its last progress, before its end
        if trial.index in self.asked and result["status"] == "stopped" and not self.control.stop_asked:
            result["status"] = "stopped early"
        self.table.apply({"trial": trial.index, "kind": "ended", "result": result})

    def _drain(self) -> None:
        while self.events:
            self.table.apply(self.events.popleft())

    def _decide_stops(self, stops) -> None:
        if self.early_stop is None:
            return
        curves = {r.trial.index: r.curve for r in self.table.rows if r.curve}
        newly = []
        for row in self.table.running():
            index = row.trial.index
            if index in self.asked or not row.curve:
                continue
            others = [c for i, c in curves.items() if i != index]
            if self.early_stop.should_stop(row.curve, others):
                newly.append(index)
                self.table.apply(
                    {"trial": index, "kind": "stopping", "why": f"stopped at iteration {row.done}: behind the median"}
                )
        if newly:
            self.asked.update(newly)
            stops.set(sorted(self.asked))

    def _finish_after_stop(self, running: dict, timeout: float = 60.0) -> None:
        """After a Ctrl-C: every running trial ends at its next boundary; collect them."""
        deadline = time.monotonic() + timeout
        while running and time.monotonic() < deadline:
            try:
                self._wait_some(running, timeout=0.5)
            except KeyboardInterrupt:  # a second Ctrl-C: leave the rest
                break
        for future, trial in running.items():
            future.cancel()
            self.table.apply(
                {"trial": trial.index, "kind": "ended", "result": {"status": "stopped", "error": None, "iterations": 0}}
            )
