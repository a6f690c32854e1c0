"""The Python API a notebook's magics and a script both use: an FDG that can run.

``workbench.FDG`` is the pure :class:`workbench.fdg.FDG` plus ``run`` / ``plan`` /
``stop`` and a drawing. Everything ``%%fragment`` and ``%fdg`` do goes through here.

Example:
    >>> import workbench as wb
    >>> fdg = wb.FDG(namespace={"limit": 3})
    >>> _ = fdg.add_fragment("counter", "n = 0", rate="init")
    >>> _ = fdg.add_fragment("counter", "n = min(n + 1, limit)", rate="step")
    >>> run = fdg.run(iterations=2, steps=5, policy="inline", progress=False)
    >>> run.status, run.completed_iterations
    ('finished', 2)
"""
from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from workbench.fdg import graph
from workbench.errors import CheckpointError, RunConfigError, WorkerLostError
from workbench.fdg.plan import Plan, make_plan
from workbench.fdg.policy import IN_PROCESS, Policy, as_policy_spec, needs_cluster, rehome, resolve_policy
from workbench.runtime.driver import InlineBackend, IterationRecord, drive
from workbench.runtime.replica import group_program
from workbench.runtime.arrays import nbytes
from workbench.runtime.run import Run
from workbench.runtime.state import RunState

__all__ = ["FDG"]

DEFAULT_ITERATIONS = 100
DEFAULT_STEPS = 128
#: iterations each candidate policy runs under policy="auto" (the first is not timed)
AUTO_TRIAL_ITERATIONS = 4
#: a run gives up after this many lost workers (something is wrong with the cluster)
MAX_RECOVERIES = 5


class FDG(graph.FDG):
    """A fragmented dataflow graph you can run.

    ``namespace`` is where names no fragment writes come from (the notebook's variables;
    a script passes ``globals()``). It may also be given per run.
    """

    def __init__(self, fragments=(), namespace: Mapping[str, Any] | None = None) -> None:
        super().__init__(fragments)
        self.namespace = namespace
        self.last_run: Run | None = None
        #: the placement board's policy (``%fdg place``); ``%fdg run`` uses it by default
        self.placement: Policy | None = None
        self._stop = threading.Event()
        self._running = threading.Lock()
        self._pending = None  # a policy to re-place the running run under

    def copy(self) -> "FDG":
        return FDG(self.fragments.values(), self.namespace)

    # -- planning ----------------------------------------------------------------------
    def plan(self, policy: str | Policy | Any = "inline", cluster=None, *, steps: int | None = None) -> Plan:
        """The plan ``run`` would execute: groups, their workers, and routes.

        With ``steps``, one inline iteration of one step measures every value's size, so
        ``plan.explain()`` shows the bytes each route moves per iteration of ``steps``.
        """
        self.validate(self.namespace or {})
        inventory = None
        if needs_cluster(policy):
            from workbench.cluster.connect import connect, inventory_of

            handle = connect(cluster, quiet=True)
            inventory = inventory_of(handle.client)
            if handle.owned and handle.cluster is None:
                handle.close()  # a client opened just to read the workers of an address
        plan = make_plan(self, resolve_policy(policy, self, inventory))
        if steps is not None:
            plan.measured = (self.measure_sizes(), steps)
        return plan

    def measure_sizes(self) -> dict[str, int]:
        """Bytes of every value a fragment writes, after one inline iteration of one step."""
        probe = self.copy()
        run = probe.run(iterations=1, steps=1, progress=False, keep_state=True)
        sizes: dict[str, int] = {}
        for replicas in run.state.fragments.values():
            for name, value in replicas[0].items():
                sizes[name] = max(sizes.get(name, 0), nbytes(value))
        return sizes

    # -- running -----------------------------------------------------------------------
    def run(
        self,
        iterations: int = DEFAULT_ITERATIONS,
        steps: int = DEFAULT_STEPS,
        *,
        policy: str | Policy | Any = "inline",
        cluster=None,
        namespace: Mapping[str, Any] | None = None,
        target_return: float | None = None,
        progress: bool = True,
        resume: RunState | Any = None,
        keep_state: bool = True,
        loggers=(),
        log_dir: str | None = None,
        checkpoint_dir: str | None = None,
        checkpoint_every: int | None = None,
        snapshot_every: int | None = None,
    ) -> Run:
        """Train: ``iterations`` iterations of ``steps`` steps each under ``policy``.

        ``policy`` is a preset name (``"inline"`` — the calling process, no Dask —,
        ``"coarse"``, ``"fine"``, ``"multilearner"``, ``"gpuonly"``, ``"async"``), ``"auto"``
        (try the presets on this cluster, keep the fastest), a ``FILE.json``, a preset
        object or a :class:`Policy`. ``cluster`` is a ``distributed.Client``, a scheduler
        address, or None (the notebook's client, else an embedded local cluster). With
        ``target_return``, the run stops once the mean of the last 20 episode returns
        reaches it.

        State: ``resume`` continues from another run's ``state``, a checkpoint directory
        or a loaded :class:`~workbench.runtime.checkpoint.Checkpoint` — under any policy
        and number of workers. ``keep_state`` keeps the final state in ``run.state`` (so
        ``run.checkpoint(path)`` works). ``checkpoint_dir`` with ``checkpoint_every=N``
        writes a checkpoint every N iterations while training (and one at the end).

        Reliability: on a cluster, replicas send their learners' state (fragments without
        step cells: weights, optimiser) to this process every ``snapshot_every`` iterations
        (default 1; 0 turns it off); when a worker dies the run re-places its fragments on
        the workers left, restores the learners from the latest snapshot (actors and envs
        start new episodes from the learner's weights) and goes on, losing at most the
        iterations since it. ``fdg.replace(policy)`` during a
        run moves fragments at the next iteration boundary, state included.

        ``progress``: False, True (a progress bar), or a factory of live views
        (``%fdg run`` shows live Bokeh plots this way). ``loggers`` get each finished
        iteration's row (``log(row)``, then ``close()``); ``log_dir`` adds a
        ``CSVLogger(log_dir/metrics.csv)`` and, when tensorboard is installed, a
        ``TensorBoardLogger(log_dir)`` (see ``workbench.profiling``).
        Returns a :class:`~workbench.runtime.run.Run`; the FDG is never modified.
        """
        _check_positive("iterations", iterations)
        _check_positive("steps", steps)
        if checkpoint_every is not None:
            _check_positive("checkpoint-every", checkpoint_every)
            if checkpoint_dir is None:
                raise RunConfigError("checkpoint_every needs checkpoint_dir: the directory to write "
                                     "checkpoints to.")
        if snapshot_every is not None and (not isinstance(snapshot_every, int) or snapshot_every < 0):
            raise RunConfigError(f"snapshot_every must be a whole number ≥ 0, got {snapshot_every!r}.")
        ns = namespace if namespace is not None else (self.namespace or {})
        self.validate(ns)
        policy = as_policy_spec(policy)  # a bad policy name or file fails before anything starts
        resume = self._resume_state(resume)
        if not self._running.acquire(blocking=False):
            raise RunConfigError("this FDG is already running; stop it first (%fdg stop or fdg.stop()).")
        handle = None
        try:
            if needs_cluster(policy):
                # connect once, before any progress display: the embedded cluster prints its
                # dashboard link, and every stretch of this run (auto tries several) shares it
                from workbench.cluster.connect import connect

                handle = connect(cluster)
                cluster = handle.client
            self._stop.clear()
            self._pending = None
            label = policy if isinstance(policy, str) else getattr(policy, "name", "custom")
            run = Run(label, iterations, steps, target_return=target_return)
            run.fdg = self.copy()
            run.loggers = _loggers(loggers, log_dir)
            self.last_run = run
            bar = _make_progress(progress, iterations, label)
            saver = _CheckpointWriter(run, checkpoint_dir, checkpoint_every)
            options = _StretchOptions(steps, cluster, ns, keep_state or saver.enabled, snapshot_every, saver)
            try:
                if policy == "auto":
                    self._run_auto(run, iterations, options, bar, resume)
                else:
                    self._run_stretches(run, iterations, policy, options, bar, resume)
                run.status = "stopped" if self._stop.is_set() else ("solved" if run.solved_at else "finished")
                saver.final()
            except KeyboardInterrupt:
                run.status = "interrupted"
                raise
            except BaseException as exc:
                run.status, run.error = "failed", exc
                raise
            finally:
                saver.close()
                if bar is not None:
                    bar.finish(run)
                for logger in run.loggers:
                    logger.close()
            return run
        finally:
            self._pending = None
            self._running.release()
            if handle is not None and handle.owned and handle.cluster is None:
                handle.close()  # a client this run opened to a scheduler address

    @property
    def running(self) -> bool:
        """True while ``run`` is training (in this thread or another)."""
        return self._running.locked()

    def replace(self, policy: str | Policy | Any) -> None:
        """Re-place a running run under ``policy`` at its next iteration boundary.

        Every fragment's state (weights, optimiser state, envs, random generators) moves to
        the new placement and training continues. Raises :class:`RunConfigError` when
        nothing is running, or for a policy that does not fit this FDG.
        """
        spec = as_policy_spec(policy)
        if isinstance(spec, Policy):
            spec.check(self)
        if not self.running:
            raise RunConfigError("nothing is running: replace() moves a running run's fragments. "
                                 "Pass the policy to run() instead.")
        self._pending = spec

    def stop(self) -> None:
        """Ask a running ``run`` (e.g. in another thread) to stop after the current iteration."""
        self._stop.set()

    def _resume_state(self, resume) -> RunState | None:
        """``resume`` as a RunState: a run's state, a Checkpoint, or a checkpoint path."""
        if resume is None or isinstance(resume, RunState):
            return resume
        from workbench.runtime.checkpoint import Checkpoint, load_checkpoint

        if isinstance(resume, (str, os.PathLike)):
            resume = load_checkpoint(resume)
        if isinstance(resume, Checkpoint):
            resume.check_fits(self)
            return resume.state
        raise RunConfigError(f"resume must be a run's state, a checkpoint or a checkpoint directory, "
                             f"not {type(resume).__name__}.")

    def _run_stretches(self, run: Run, iterations: int, policy, options: "_StretchOptions", bar,
                       resume: RunState | None) -> None:
        """Run under ``policy`` until done; a re-placement request or a lost worker ends a
        stretch, and the next one continues from its state under the new placement."""
        state, current = resume, policy
        while True:
            left = iterations - run.completed_iterations
            try:
                self._run(run, left, current, options, bar, state)
            except WorkerLostError as lost:
                state = self._recover(run, lost, state)
                continue
            if self._pending is None or run.completed_iterations >= iterations or run.is_solved() \
                    or self._stop.is_set():
                return
            current, self._pending, state = self._pending, None, run.state
            run.note("replaced", f"re-placed at iteration {state.iteration}: now "
                     f"{getattr(current, 'name', current)} (state moved with the fragments)", state.iteration)

    def _recover(self, run: Run, lost: WorkerLostError, previous: RunState | None) -> RunState | None:
        """After a worker died: rewind the record to the newest snapshot, and say so."""
        state = lost.state if lost.state is not None else previous
        first = previous.iteration if previous is not None else 0
        resume_at = state.iteration if state is not None else first
        dropped = run.rewind(resume_at)
        run.lost_iterations += dropped
        if len([e for e in run.events if e["event"] == "worker lost"]) >= MAX_RECOVERIES:
            raise RunConfigError(f"{MAX_RECOVERIES} workers were lost in this run; giving up. "
                                 "Check the cluster (memory, crashes) before running again.") from lost
        run.note("worker lost", f"{lost}; re-placing its fragments on the workers left and "
                 f"continuing from iteration {resume_at} ({dropped} finished iteration"
                 f"{'s' if dropped != 1 else ''} run again)", resume_at)
        return state

    def _run(self, run: Run, iterations: int, policy, options: "_StretchOptions", bar,
             resume: RunState | None, *, stop_after=None) -> None:
        """One placement's stretch of a run: ``iterations`` iterations, recorded into ``run``."""
        inventory, handle = None, None
        policy = as_policy_spec(policy)  # an unknown name fails before any cluster starts
        if needs_cluster(policy):
            from workbench.cluster.connect import connect, inventory_of

            handle = connect(options.cluster)
            inventory = inventory_of(handle.client)
        resolved = _fit_to_cluster(resolve_policy(policy, self, inventory), self, inventory, run)
        plan = make_plan(self, resolved)
        ns = options.namespace
        notebook = {n: ns[n] for n in self.notebook_names() if n in ns}
        programs = {g: group_program(plan, g, options.steps) for g in plan.groups}
        if resolved.in_process:
            backend = InlineBackend()
        else:
            from workbench.cluster.backend import DaskBackend

            backend = DaskBackend(handle.client, inventory)
        if not run.policy_name.startswith("auto"):
            run.policy_name = resolved.name
        run.policy = resolved
        run.plan_text = plan.explain()
        start = resume.iteration if resume is not None else 0
        completed = 0
        every, full_every = options.snapshots_for(resolved)

        def on_iteration(rec: IterationRecord) -> bool:
            nonlocal completed
            completed += 1
            run.record(rec)
            for logger in run.loggers:
                logger.log(run.rows[-1])
            if bar is not None:
                bar.advance(run)
            return (run.is_solved() or self._stop.is_set() or self._pending is not None
                    or (stop_after is not None and stop_after(completed)))

        try:
            if not run.rows:
                run.started = time.perf_counter()  # the clock includes deploying the replicas
            backend.deploy(plan, programs, notebook, _states_for(plan, resume))
            try:
                drive(plan, backend, iterations, on_iteration, start=start, snapshot_every=every,
                      full_snapshot_every=full_every, on_snapshot=options.saver.stretch(plan, resolved))
            except WorkerLostError as lost:
                lost.state = _snapshot_state(plan, backend.snapshots)
                lost.iteration = start + completed
                raise
            if options.keep_state or self._pending is not None:
                run.state = _collect_state(plan, backend.export(), start + completed)
        finally:
            backend.teardown()

    def _run_auto(self, run: Run, iterations: int, options: "_StretchOptions", bar, resume) -> None:
        """Try each applicable preset for a few iterations on the real cluster, continuing
        one learning state through all of them; then train on with the fastest."""
        from workbench.cluster.connect import connect, inventory_of
        from workbench.fdg.policy import auto_candidates

        inventory = inventory_of(connect(options.cluster).client)
        candidates = auto_candidates(self, inventory)
        trial = max(2, min(AUTO_TRIAL_ITERATIONS, (iterations - 1) // max(1, len(candidates))))
        state, table = resume, []
        trying = dataclasses.replace(options, keep_state=True)
        for name, preset in candidates:
            if run.completed_iterations + trial >= iterations or run.is_solved() or self._stop.is_set():
                break
            first = len(run.rows)
            self._run(run, trial, preset, trying, bar, state)
            state = run.state
            table.append({"policy": name, "env-steps/s": _steady_rate(run.rows[first:])})
        run.auto_table = table
        if not table:
            raise RunConfigError(f"--iterations {iterations} is too few for policy auto: it needs "
                                 f"more than {trial} per candidate policy.")
        best = max(table, key=lambda row: row["env-steps/s"])
        run.policy_name = f"auto → {best['policy']}"
        print(_auto_summary(table, best["policy"]))
        if not run.is_solved() and not self._stop.is_set():
            self._run_stretches(run, iterations, dict(candidates)[best["policy"]], options, bar, state)

    # -- display -----------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from workbench.fdg.render import render_html

        return render_html(self)


@dataclasses.dataclass(frozen=True)
class _StretchOptions:
    """What every stretch of one run shares."""

    steps: int
    cluster: Any
    namespace: Mapping[str, Any]
    keep_state: bool
    snapshot_every: int | None
    saver: "_CheckpointWriter"

    def snapshots_for(self, policy: Policy) -> tuple[int, int]:
        """How often replicas send snapshots of their learners (every iteration on a
        cluster: a lost worker costs at most the iteration in flight; never in-process),
        and of every fragment (when a checkpoint is due)."""
        every = self.snapshot_every if self.snapshot_every is not None else (0 if policy.in_process else 1)
        return every, self.saver.every


class _CheckpointWriter:
    """Writes a checkpoint every ``every`` iterations from the replicas' snapshots, in a
    background thread (the run does not wait for the disk), and one at the end."""

    def __init__(self, run: Run, directory: str | None, every: int | None) -> None:
        self.run, self.directory = run, directory
        self.enabled = directory is not None
        self.every = every or 0
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def stretch(self, plan: Plan, policy: Policy):
        """The ``on_snapshot`` hook for one stretch: queue each due checkpoint."""
        if not self.every:
            return None

        def on_snapshot(iteration: int, pickled: dict) -> None:
            if iteration % self.every == 0:
                self._queue((plan, iteration, pickled, policy))

        return on_snapshot

    def _queue(self, job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="workbench-checkpoints", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _work(self) -> None:
        from workbench.runtime.checkpoint import save_checkpoint
        from workbench.runtime.snapshots import state_from

        while True:
            job = self._jobs.get()
            if job is None:
                return
            plan, iteration, pickled, policy = job
            try:
                state = state_from(plan, iteration, pickled)
                self.run.checkpoints.append(str(save_checkpoint(self.directory, state, self.run.fdg, policy)))
            except BaseException as exc:  # reported once, at the end; training goes on
                self.error = exc

    def final(self) -> None:
        """The run ended: write its final state (after the queued ones)."""
        self.close()
        if self.error is not None:
            raise CheckpointError(f"writing a checkpoint to {self.directory} failed: {self.error}") \
                from self.error
        if self.enabled and self.run.state is not None:
            self.run.checkpoint(self.directory)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None


def _fit_to_cluster(policy: Policy, fdg, inventory, run: Run) -> Policy:
    """A concrete policy whose workers have left is moved onto the workers there are (a
    preset is placed afresh on the current workers anyway)."""
    if inventory is None:
        return policy
    gone = [w for g in policy.groups for w in g.workers if w != IN_PROCESS and inventory.find(w) is None]
    if not gone:
        return policy
    moved = rehome(policy, inventory)
    run.note("re-placed", f"workers {', '.join(sorted(set(gone)))} are gone: moved their replicas "
             f"to {moved!r}")
    return moved


def _snapshot_state(plan: Plan, book) -> RunState | None:
    if book is None:
        return None
    found = book.latest()
    if found is None:
        return None
    from workbench.runtime.snapshots import state_from

    return state_from(plan, found[0], found[1])


def _states_for(plan: Plan, resume: RunState | None) -> dict[tuple[str, int], dict] | None:
    """Lay a resumed state out over this plan's replicas: (group, index) → fragment states."""
    if resume is None:
        return None
    counts = {f: g.replicas for g in plan.policy.groups for f in g.fragments}
    layout = resume.layout(counts)
    out: dict[tuple[str, int], dict] = {}
    for group in plan.policy.groups:
        for index in range(group.replicas):
            out[(group.name, index)] = {f: layout[f][index] for f in group.fragments
                                        if layout[f][index] is not None}
    return out


def _collect_state(plan: Plan, exported: dict, iteration: int) -> RunState:
    fragments: dict[str, list] = {}
    for group in plan.policy.groups:
        for frag in group.fragments:
            fragments[frag] = [exported[(group.name, i)][frag] for i in range(group.replicas)]
    stepping = frozenset(n for n, f in plan.fdg.fragments.items() if "step" in f.cells)
    return RunState(iteration, fragments, stepping)


def _steady_rate(rows: list[dict]) -> float:
    """env-steps/s over a stretch of iterations, leaving out the first (deploy, warm-up)."""
    if len(rows) < 2:
        return 0.0
    steps = rows[-1]["env_steps"] - rows[0]["env_steps"]
    seconds = rows[-1]["time_s"] - rows[0]["time_s"]
    return steps / seconds if seconds > 0 else 0.0


def _auto_summary(table: list[dict], best: str) -> str:
    lines = ["policy auto measured (env-steps/s, first iteration of each left out):"]
    lines += [f"  {row['policy']:<22} {row['env-steps/s']:>12,.0f}" + ("   ← continuing with this" if row["policy"] == best else "")
              for row in table]
    return "\n".join(lines)


def _loggers(loggers, log_dir: str | None) -> list:
    out = list(loggers)
    if log_dir is not None:
        import os

        from workbench.profiling.loggers import CSVLogger, TensorBoardLogger, tensorboard_available

        out.append(CSVLogger(os.path.join(log_dir, "metrics.csv")))
        if tensorboard_available():
            out.append(TensorBoardLogger(log_dir))
    return out


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RunConfigError(f"--{name} must be a whole number ≥ 1, got {value!r}.")


def _make_progress(progress, total: int, label: str):
    """``progress``: False (none), True (a text bar), or a factory ``(total, label) ->``
    object with ``advance(run)`` and ``finish(run)`` (``%fdg run`` passes the live view)."""
    if not progress:
        return None
    if callable(progress):
        return progress(total, label)
    return _TextProgress(total, label)


class _TextProgress:
    """tqdm's bar (a widget in notebooks, text elsewhere) with throughput and return."""

    def __init__(self, total: int, label: str) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=f"training ({label})", unit="it", leave=True)

    def advance(self, run: Run) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(_postfix(run), refresh=False)

    def finish(self, run: Run) -> None:
        self.bar.close()


def _postfix(run: Run) -> str:
    mean = run.mean_return()
    ret = f"{mean:.0f}" if mean is not None else "–"
    return f"{run.steps_per_second:,.0f} env-steps/s · return {ret}"
