"""The Trainer: runs an FDG under a :class:`~workbench.config.RunConfig`.

A run is a sequence of *stretches*, each under one concrete placement. A re-placement
request (:meth:`Trainer.replace`) or a lost worker ends a stretch; the next continues from
its state under the new placement. ``policy="auto"`` is a few short stretches (one per
candidate preset) and then a long one under the fastest. The trainer owns that loop, the
recovery after a lost worker, checkpoint writing and progress; it builds the
:class:`~workbench.runtime.state.run.Run` record as it goes.

Example:
    >>> import workbench as wb
    >>> from workbench.config import RunConfig
    >>> fdg = wb.FDG(namespace={"limit": 3})
    >>> _ = fdg.add_fragment("counter", "n = 0", rate="init")
    >>> _ = fdg.add_fragment("counter", "n = min(n + 1, limit)", rate="step")
    >>> run = Trainer(fdg, RunConfig(iterations=2, steps=5, progress=False)).run()
    >>> run.status, run.completed_iterations
    ('finished', 2)

``fdg.run(iterations=2, steps=5, progress=False)`` is the one-line way to do the same.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from workbench.auto_trials import AUTO_TRIAL_ITERATIONS, auto_summary, check_budget, steady_rate, trial_length
from workbench.config import DEFAULT_UNIT, RunConfig
from workbench.devices import gpus_here
from workbench.errors import (
    CellNotReturningError,
    ProcessDiedError,
    RunConfigError,
    SchedulerLostError,
    WorkerLostError,
)
from workbench.fdg.board import fastest_trial
from workbench.fdg.graph import Graph
from workbench.fdg.plan import make_plan, plan_in_flight
from workbench.fdg.policy import IN_PROCESS, Policy, as_policy_spec, needs_cluster, resolve_policy
from workbench.fdg.rehome import rehome
from workbench.live_edits import kept_init_values, note_changes, say_unapplied, with_new_init_names
from workbench.progress import make_progress
from workbench.runtime.state.checkpoint_writer import CheckpointWriter
from workbench.runtime.engine.driver import IterationRecord, drive
from workbench.runtime.engine.inline import CarriedEnvs, InlineBackend, left_running_notice
from workbench.runtime.engine.faults import announce, fault_line
from workbench.runtime.process.interrupts import shielded
from workbench.runtime.replicas.lanes import NOT_PLACED_FOR_LANES, placed_for_lanes
from workbench.runtime.replicas.on_arrival import check_act_on_arrival
from workbench.runtime.engine.notebook_values import taken_at_deploy, values_for_stretch
from workbench.runtime.replicas.replica import group_program
from workbench.runtime.state.run import Run, rate_label
from workbench.runtime.transport.serialisable import check_notebook, quiet_dask_serialisation, readers_of
from workbench.runtime.state.replica_state import RunState
from workbench.training_clips import Clip, ClipMaker
from workbench.stretch_state import collect_state, counts_in, say_left_out, settle_counts, snapshot_state, states_for

__all__ = ["Trainer", "TrainerState", "AUTO_TRIAL_ITERATIONS", "MAX_RECOVERIES"]

#: a run gives up after this many lost workers (something is wrong with the cluster)
MAX_RECOVERIES = 5


@dataclasses.dataclass
class TrainerState:
    """What a :class:`Trainer` keeps while its run trains, between and across stretches.

    The trainer alone changes it (:mod:`workbench.live_edits` and
    :mod:`workbench.runtime.engine.notebook_values` return what changes; the trainer applies it).
    The notebook's thread asks through the trainer's methods (:meth:`Trainer.apply_at_boundary`,
    :meth:`Trainer.mark_sent`, :meth:`Trainer.replace`); the trainer reads and changes
    ``changes``, ``sent_names`` and ``ending`` with :attr:`Trainer.lock` held.

    >>> TrainerState().ending, TrainerState().changes
    (True, [])
    """

    #: a policy to re-place the running run under at its next boundary (:meth:`Trainer.replace`)
    pending: Any = None
    #: changes to apply at the next iteration boundary: (kind, what changed)
    changes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: the boundary is decided (or the stretch not yet planned): a change made now lands
    #: where the next stretch starts, one past the newest recorded iteration
    ending: bool = True
    #: the run takes no more changes: its last stretch has ended
    over: bool = False
    #: (name, part) → the parts of notebook values only init cells read, as the first
    #: stretch gave them (:func:`~workbench.live_edits.kept_init_values`); None before it
    init_values: dict | None = None
    #: name → the notebook value each stretch deploys with unless sent again
    #: (:func:`~workbench.runtime.engine.notebook_values.values_for_stretch`)
    given_values: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the names ``fdg.update`` sent since the last stretch was planned
    sent_names: set[str] = dataclasses.field(default_factory=set)
    #: a lost worker's (error, policy before, iteration resumed at, iterations redone),
    #: said once the next stretch is placed
    fault: tuple | None = None
    #: (iteration, groups) of the last lost worker: the same again stops the run
    last_loss: tuple | None = None
    #: the envs in-process stretches hand on to the next (set when training starts)
    carried: CarriedEnvs | None = None
    #: the metric loggers every recorded iteration goes to
    loggers: list = dataclasses.field(default_factory=list)
    #: the progress display (None: none)
    bar: Any = None
    #: the run's name on the dashboard page (its first cluster stretch's id)
    page_key: str | None = None


@dataclasses.dataclass(frozen=True)
class _Stretch:
    """What every stretch of one run shares, resolved once at the start."""

    config: RunConfig
    cluster: Any  # a distributed.Client on a cluster run, else None
    namespace: Mapping[str, Any]
    keep_state: bool
    writer: CheckpointWriter
    #: the run's clips (``--video-every``), else None
    clips: ClipMaker | None = None

    def snapshots_for(self, policy: Policy) -> tuple[int, int]:
        """How often replicas send snapshots of their learners (on a cluster every
        iteration, or as often as keeps them to ~5 % of the run's time where they are big:
        `workbench.runtime.state.snapshot_pacing`; never in-process), and of every fragment (when
        a checkpoint is due)."""
        every = self.config.snapshot_every
        if every is None:
            every = 0 if policy.in_process else 1
        return every, self.writer.every


class Trainer:
    """Trains ``fdg`` as ``config`` says. One trainer runs once; make another to run again.

    ``namespace`` is where the names no fragment writes come from (default: the FDG's).
    :meth:`stop` and :meth:`replace` may be called from another thread while :meth:`run`
    trains.
    """

    def __init__(self, fdg: Graph, config: RunConfig, *, namespace: Mapping[str, Any] | None = None) -> None:
        self.fdg = fdg  # a workbench.FDG (or any Graph with a copy())
        self.config = config
        self.namespace = namespace if namespace is not None else (getattr(fdg, "namespace", None) or {})
        self.run_record: Run | None = None
        self._policy = self._resume = None  # set by prepare(): the policy spec, the state to resume
        self._stop = threading.Event()
        #: the run's state between and across stretches; only the trainer changes it
        self.state = TrainerState()
        #: held while a change is made and announced, while an iteration is recorded and
        #: while a stretch takes the FDG: a change lands at the boundary its notice names
        self.lock = threading.RLock()

    # -- control from another thread -------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current iteration; asked before the run deploys, it never does."""
        self._stop.set()

    def replace(self, spec) -> None:
        """Re-place the run under ``spec`` at its next iteration boundary."""
        self.state.pending = spec

    def mark_sent(self, names) -> None:
        """``names`` were sent to the run (``fdg.update``): the next stretch deploys their
        values as the notebook holds them then. Call with :attr:`lock` held."""
        self.state.sent_names = self.state.sent_names | set(names)

    @property
    def init_values(self) -> dict | None:
        """The parts of notebook values only init cells read, as the run's first stretch
        gave them (read by :func:`~workbench.live_edits.init_only_changes`)."""
        return self.state.init_values

    @property
    def _pending(self):
        """The re-placement asked for and not yet made (read by
        :func:`~workbench.live_edits.init_only_changes`)."""
        return self.state.pending

    def check_change(self, graph: Graph) -> None:
        """Raise unless ``graph`` (the FDG as an edit would leave it) can run under the
        running placement: an edit that cannot is refused, and the old cells keep running."""
        graph.validate(self.namespace)
        run = self.run_record
        if run is not None and run.policy is not None:
            plan_in_flight(graph, run.policy)  # a new fragment cannot join: said so (fdg/unplaced.py)

    def apply_at_boundary(self, kind: str, what: str) -> int | None:
        """End the current stretch at the next iteration boundary; the next one starts from
        its state with the FDG's cells and notebook values as they are then. Returns the
        iteration the change applies from at the earliest (said again, exactly, when it
        lands; never earlier), or None when the run has ended and takes no more changes.
        Make the change itself while holding :attr:`lock`, as ``FDG.add_fragment`` does."""
        with self.lock:
            run = self.run_record
            if self.state.over:
                return None
            # the newest row, then the change: unless a boundary is decided already, the
            # driver acts on it at a row after this one (see _record), so the
            # boundary is at least two past it; a decided one is at least one past it
            last = run.rows[-1]["iteration"] if run is not None and run.rows else -1
            self.state.changes.append((kind, what))
            return last + (1 if self.state.ending or self._ends(None) else 2)

    def _ends(self, run: Run | None) -> bool:
        """Whether the stretch ends at the next boundary for a stop, a re-placement or
        (``run`` given) a solved run."""
        return self._stop.is_set() or self.state.pending is not None or (run is not None and run.is_solved())

    # -- the run -------------------------------------------------------------------------
    def prepare(self) -> Run:
        """Check the FDG, the policy and what to resume from, and make the run's record.

        Everything that can refuse a run without starting it happens here, so a refused run
        leaves ``fdg.last_run`` as it was, and a run that trains has its record (status
        ``"running"``) from its first moment, while it still connects and deploys. :meth:`run`
        calls it when it has not been called.
        """
        if self.run_record is not None:
            return self.run_record
        config = self.config
        self.fdg.validate(self.namespace)
        self._policy = as_policy_spec(config.policy)  # a bad policy name or file fails before anything starts
        _check_in_process_gpus(self._policy, self.fdg)
        self._resume = self._resume_state(config.resume)
        policy = self._policy
        label = policy if isinstance(policy, str) else getattr(policy, "name", "custom")
        run = Run(label, config.iterations, config.steps, target_return=config.target_return, unit=config.unit)
        run.fdg = self.fdg.copy()
        self.run_record = run
        return run

    def run(self) -> Run:
        """Train; return the run's record (also while failing: ``fdg.last_run``)."""
        config = self.config
        self.prepare()
        policy, resume = self._policy, self._resume
        handle = None
        try:
            cluster = None
            if (needs_cluster(policy) or config.cluster is not None) and not self._stop.is_set():
                # (given: a re-placement may use it; stopped before it began: nothing to connect)
                # connect once, before any progress display: the embedded cluster prints its
                # dashboard link, and every stretch of this run (auto tries several) shares it
                from workbench.cluster.connect import connect

                try:
                    handle = connect(config.cluster)
                except BaseException as exc:
                    # a run that never reached its cluster never started: the record (made by
                    # prepare, seen by whoever polled meanwhile) says why, and is let go, so
                    # fdg.last_run goes back to the run before it (a typo loses nothing)
                    self.run_record.status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                    self.run_record.error = exc
                    self.run_record = None
                    raise
                cluster = handle.client
            return self._train(policy, cluster, resume)
        finally:
            if handle is not None and handle.owned and handle.cluster is None:
                handle.close()  # a client this run opened to a scheduler address

    def _train(self, policy, cluster, resume: RunState | None) -> Run:
        config = self.config
        run = self.run_record
        run.started = time.perf_counter()  # rates count from training, not from connecting
        left_running = left_running_notice()
        if left_running is not None:  # a thread an earlier stop could not end slows this run: never unseen
            run.note("cell left running", left_running)
        loggers = _loggers(config.loggers, config.log_dir)
        bar = make_progress(config.progress, config.iterations, run.policy_name)
        writer = CheckpointWriter(run, config.checkpoint_dir, config.checkpoint_every)
        clips = _clip_maker(run, config.video_every, loggers, bar)
        stretch = _Stretch(config, cluster, self.namespace, config.keep_state or writer.enabled, writer, clips)
        self.state.loggers, self.state.bar, self.state.carried = loggers, bar, CarriedEnvs()
        self.state.fault = None
        try:
            try:
                if self._stop.is_set():
                    pass  # stopped before it began (fdg.stop() while it started): nothing ran
                elif policy == "auto":
                    self._run_auto(run, stretch, resume)
                else:
                    self._run_stretches(run, policy, stretch, resume)
            except CellNotReturningError as stuck:
                if not self._stop.is_set():
                    raise
                print(f"workbench: stopped; {stuck}", flush=True)  # what was asked for, with why it took long
            with self.lock:  # no more changes: one asked for too late is said, not dropped
                self.state.over = True
                say_unapplied(run, self.state.changes, self.state.pending)
                self.state.changes, self.state.pending = [], None
            run.status = "stopped" if self._stop.is_set() else ("solved" if run.solved_at else "finished")
            writer.final()
        except KeyboardInterrupt:
            run.status = "interrupted"
            raise
        except BaseException as exc:
            if isinstance(exc, SchedulerLostError):  # name the newest checkpoint, once the queued ones are written
                from workbench.runtime.state.checkpoint import newest_loadable

                writer.close()
                exc.checkpoints_in(
                    config.checkpoint_dir, config.checkpoint_dir and newest_loadable(config.checkpoint_dir)
                )
            run.status, run.error = "failed", exc
            raise
        finally:
            self.state.over = True
            self.state.carried.close()  # the envs stretches handed on: nothing steps them now
            writer.close()
            if clips is not None:
                clips.close()  # the clip being made is finished first: it shows the end of training
                for kind, text in clips.notes():
                    run.note(kind, text)
            if bar is not None:
                bar.finish(run)
            for logger in loggers:
                logger.close()
        return run

    def _resume_state(self, resume) -> RunState | None:
        """``resume`` as a RunState: a run's state, a Checkpoint, or a checkpoint path."""
        if resume is None or isinstance(resume, RunState):
            return resume
        from workbench.runtime.state.checkpoint import Checkpoint, load_checkpoint

        if isinstance(resume, (str, os.PathLike)):
            resume = load_checkpoint(resume)
        if isinstance(resume, Checkpoint):
            resume.check_fits(self.fdg)
            return resume.state
        raise RunConfigError(
            f"resume must be a run's state, a checkpoint or a checkpoint directory, not {type(resume).__name__}."
        )

    def _run_stretches(self, run: Run, policy, stretch: _Stretch, resume: RunState | None) -> None:
        """Run under ``policy`` until done; a re-placement request or a lost worker ends a
        stretch, and the next one continues from its state under the new placement."""
        state, current = resume, policy
        while True:
            left = run.iterations - run.completed_iterations
            try:
                self._run_one(run, left, current, stretch, state)
            except WorkerLostError as lost:
                state = self._recover(run, lost, state)
                continue
            with self.lock:  # the changes are noted where the next stretch takes the FDG
                if self.state.pending is None and not self.state.changes:
                    return
                if run.completed_iterations >= run.iterations or run.is_solved() or self._stop.is_set():
                    return  # _train says what was not applied
                state, pending, self.state.pending = run.state, self.state.pending, None
            if pending is None:
                continue  # the same placement, re-planned from the FDG as it is now
            current = pending
            run.note(
                "replaced",
                f"re-placed at iteration {state.iteration}: now "
                f"{getattr(current, 'name', current)} (state moved with the fragments)",
                state.iteration,
            )

    def _recover(self, run: Run, lost: WorkerLostError, previous: RunState | None) -> RunState | None:
        """After a worker died: rewind the record to the newest snapshot, and say so."""
        state = lost.state if lost.state is not None else previous
        first = previous.iteration if previous is not None else 0
        resume_at = state.iteration if state is not None else first
        dropped = run.rewind(resume_at)
        run.lost_iterations += dropped
        _check_not_repeating(run, lost, self.state.last_loss)
        self.state.last_loss = (lost.iteration, _groups_on(run, lost.workers))
        if sum(e.kind == "worker lost" for e in run.events) >= MAX_RECOVERIES:
            raise RunConfigError(
                f"{MAX_RECOVERIES} workers were lost in this run; giving up. "
                "Check the cluster (memory, crashes) before running again."
            ) from lost
        # said once the next stretch is placed: the line names where the fragments went
        self.state.fault = (lost, run.policy, resume_at, dropped)
        return state

    def _run_one(self, run: Run, iterations: int, policy, stretch: _Stretch, resume: RunState | None) -> None:
        """One placement's stretch of a run: ``iterations`` iterations, recorded into ``run``."""
        policy = as_policy_spec(policy)  # an unknown name fails before any cluster starts
        if self._stop.is_set():
            return  # stopped before this stretch began: nothing to place
        client, inventory = _connect_for(policy, stretch)
        start = resume.iteration if resume is not None else 0
        fdg, notebook = self._take_changes(run, stretch, start)
        resolved = self._resolve_placement(run, policy, fdg, inventory, stretch)
        placed = _plan_stretch(run, fdg, resolved, stretch.config)
        notebook = _values_to_deploy(notebook, resolved)
        if self._stop.is_set():
            return  # stopped while it connected: nothing deployed, nothing to wait for
        backend = self._backend_for(resolved, client, inventory, stretch, start)
        self._announce_fault(run, resolved, backend)
        _record_placement(run, placed)
        try:
            self._run_replicas(run, placed, backend, notebook, iterations, start, stretch, resume)
        finally:
            with shielded("releasing the run's replicas"):  # a second Ctrl-C must not cut this short
                backend.teardown()

    def _take_changes(self, run: Run, stretch: _Stretch, start: int) -> tuple[Graph, dict[str, Any]]:
        """The FDG and the notebook values this stretch runs, as the changes noted so far
        left them; those changes are noted in ``run`` as applying from ``start`` (under the
        lock :meth:`apply_at_boundary` takes: a change lands at the boundary it was told)."""
        state = self.state
        with self.lock:
            fdg, state.ending = self.fdg.copy(), False
            # each stretch deploys the first's values, but for those sent since
            taken = values_for_stretch(state.given_values, state.sent_names, stretch.namespace, fdg.notebook_names())
            state.given_values, state.sent_names = taken.given, set()
            if state.init_values is None:  # where fdg.update compares what only init cells read
                state.init_values = kept_init_values(self.fdg, self.namespace)
            changes, state.changes = state.changes, []
            note_changes(run, changes, start)
        return fdg, taken.values

    def _resolve_placement(self, run: Run, policy, fdg: Graph, inventory, stretch: _Stretch) -> Policy:
        """The concrete policy this stretch runs under, on the workers there are."""
        if isinstance(policy, Policy) and inventory is not None and self.state.fault is not None:
            # a policy of the user's own names its workers: after a loss, off the lost ones (the
            # fault's line says where its groups went); one that names a missing worker from the
            # start is refused by the check instead
            policy = rehome(policy, inventory)
        resolved = _fit_to_cluster(resolve_policy(policy, fdg, inventory, gpus_here=gpus_here), inventory, run)
        if resolved.in_process and stretch.cluster is not None:  # asked for, not used: say so
            run.note_once(
                "not applied",
                f"policy {resolved.name} runs every fragment in this process, so the "
                "cluster given is not used (until the run is re-placed onto it, fdg.replace('coarse')); "
                "pick a cluster policy (coarse, fine, …) to train on it",
            )
        return resolved

    def _backend_for(self, resolved: Policy, client, inventory, stretch: _Stretch, start: int):
        """The backend that runs this stretch's replicas: in this process, or on the cluster."""
        if resolved.in_process:
            return InlineBackend(self.state.carried)  # a next stretch may step the same envs
        from workbench.cluster.backend import DaskBackend
        from workbench.cluster.dashboard_model import STRETCH_EVENT, UNIT_EVENT

        backend = DaskBackend(client, inventory, lost_after=stretch.config.lost_after)
        # a later stretch's topic names the run's first: one entry on the dashboard page
        if self.state.page_key is None:
            self.state.page_key = backend.run_id
        else:
            backend.announce(STRETCH_EVENT, self.state.page_key, start)
        if stretch.config.unit != DEFAULT_UNIT:  # the dashboard page names the steps as the run does
            backend.announce(UNIT_EVENT, stretch.config.unit, start)
        return backend

    def _announce_fault(self, run: Run, resolved: Policy, backend) -> None:
        """Say the lost worker that ended the last stretch, naming where its fragments went."""
        fault, self.state.fault = self.state.fault, None
        if fault is None:
            return
        lost, before, resume_at, dropped = fault
        line = fault_line(lost, getattr(before, "groups", ()), resolved.groups, resume_at=resume_at, redone=dropped)
        announce(run, line, resume_at, self.state.loggers, backend)

    def _run_replicas(
        self,
        run: Run,
        placed: _Placed,
        backend,
        notebook: dict[str, Any],
        iterations: int,
        start: int,
        stretch: _Stretch,
        resume: RunState | None,
    ) -> None:
        """Deploy the replicas from ``resume``, drive them, settle the env-step counts and
        collect their state (the caller tears the backend down)."""
        if not run.rows:
            run.started = time.perf_counter()  # the clock includes deploying the replicas
        states = with_new_init_names(placed.plan, states_for(placed.plan, resume))  # edited init cells run
        _deploy(backend, placed, notebook, states)
        # the env replicas' own counts settle the stretch's: steps of iterations left unfinished count
        counts = counts_in(states), dict(run.replica_env_steps)
        completed = self._drive(run, placed, backend, iterations, start, stretch, counts, notebook)
        settle_counts(run, backend, *counts)
        self._collect(run, placed.plan, backend, start + completed, stretch)

    def _drive(
        self,
        run: Run,
        placed: _Placed,
        backend,
        iterations: int,
        start: int,
        stretch: _Stretch,
        counts: tuple[dict[str, int], dict[str, int]],
        notebook: dict[str, Any],
    ) -> int:
        """Drive the deployed replicas through ``iterations`` iterations from ``start``,
        recording each; return how many were recorded. A lost worker's error carries the
        newest snapshot's state to resume from."""
        plan, completed = placed.plan, 0
        every, full_every = stretch.snapshots_for(placed.policy)

        def on_iteration(rec: IterationRecord) -> bool:
            nonlocal completed
            completed += 1
            return self._record(run, rec)

        try:
            # lockstep with a target: the run stops at the iteration that met it (docs/counting.md)
            drive(
                plan,
                backend,
                iterations,
                on_iteration,
                start=start,
                snapshot_every=every,
                full_snapshot_every=full_every,
                on_snapshot=_each(
                    stretch.writer.stretch(plan, placed.policy, stretch.clips.every if stretch.clips else 0),
                    stretch.clips.stretch(plan, notebook) if stretch.clips else None,
                ),
                clip_every=stretch.clips.every if stretch.clips else 0,
                stopping=self._stop.is_set,
                lockstep=run.target_return is not None,
                snapshot_paced=self.config.snapshot_every is None,
            )
        except CellNotReturningError:
            settle_counts(run, backend, *counts)
            backend.overdue = True  # its loops were given their grace already: don't wait again
            raise
        except WorkerLostError as lost:
            lost.state = snapshot_state(plan, backend.snapshots)
            if lost.iteration is None:  # none of its replicas had begun an iteration (drive says which)
                lost.iteration = start + completed
            raise
        return completed

    def _record(self, run: Run, rec: IterationRecord) -> bool:
        """Record one iteration (the run, its loggers, the progress display); return
        whether the stretch ends at this boundary."""
        state = self.state
        # decided with the row, under the lock apply_at_boundary takes: a change asked for
        # after it is acted on at the next row (its notice: two past this one), or, when
        # this row ends the stretch, lands at that boundary (its notice: one past)
        with self.lock:
            changed = bool(state.changes)
            run.record(rec)
            ending = changed or self._ends(run)
            state.ending = state.ending or ending
            asked = len(state.changes)
            for logger in state.loggers:
                logger.log(run.rows[-1])
            if state.bar is not None:
                state.bar.advance(run)
            if not ending and len(state.changes) == asked:  # a stop, a re-placement asked meanwhile
                ending = self._ends(run)
                state.ending = state.ending or ending
        return ending

    def _collect(self, run: Run, plan, backend, iteration: int, stretch: _Stretch) -> None:
        """Keep the replicas' state in ``run.state`` where a next stretch, a checkpoint or
        the caller needs it; otherwise this was the last stretch."""
        with self.lock:  # a change from here on goes to a next stretch, which needs the state
            keep = stretch.keep_state or self.state.pending is not None or bool(self.state.changes)
            self.state.over = self.state.over or not keep  # …or is said not applied: this was the last
        if keep:
            run.state = collect_state(plan, backend.export(), iteration)
            say_left_out(run)

    def _run_auto(self, run: Run, stretch: _Stretch, resume) -> None:
        """Try each applicable preset for a few iterations on the real cluster, continuing
        one learning state through all of them; then train on with the fastest."""
        from workbench.cluster.connect import inventory_of
        from workbench.cluster.restarts import wait_for_restarts
        from workbench.fdg.auto_candidates import auto_candidates

        iterations = run.iterations
        wait_for_restarts(stretch.cluster)
        candidates = auto_candidates(self.fdg, inventory_of(stretch.cluster), self.config.auto_lag)
        trial = trial_length(iterations, len(candidates))
        check_budget(iterations, candidates, trial, run.completed_iterations)
        state, table = resume, []
        run.auto_table = table
        trying = dataclasses.replace(stretch, keep_state=True)
        for name, preset in candidates:
            if run.completed_iterations + trial >= iterations or run.is_solved() or self._stop.is_set():
                break
            first = len(run.rows)
            self._run_one(run, trial, preset, trying, state)
            state = run.state
            table.append({"policy": name, "rate": steady_rate(run.rows[first:]), "unit": rate_label(run.unit)})
        if not table:
            if self._stop.is_set():
                return
            raise RunConfigError(
                f"--iterations {iterations} is too few for policy auto: it needs "
                f"more than {trial} per candidate policy."
            )
        best = fastest_trial(table)
        run.policy_name = f"auto → {best}"
        print(auto_summary(table, best, candidates.left_out))
        if not run.is_solved() and not self._stop.is_set():
            self._run_stretches(run, dict(candidates)[best], stretch, state)


@dataclasses.dataclass(frozen=True)
class _Placed:
    """A stretch's placement: the FDG it runs, the concrete policy, the plan, and each
    group's program."""

    fdg: Graph
    policy: Policy
    plan: Any  # a workbench.fdg.plan.Plan
    programs: dict


def _connect_for(policy, stretch: _Stretch) -> tuple[Any, Any]:
    """(client, inventory) for a policy that needs the cluster, with a worker to place on
    (one a stuck cell's stop restarted placed on again); (None, None) in-process."""
    if not needs_cluster(policy):
        return None, None
    from workbench.cluster.connect import connect, inventory_of
    from workbench.cluster.restarts import wait_for_a_worker, wait_for_restarts

    client = connect(stretch.cluster).client
    wait_for_restarts(client)  # a worker a stuck cell's stop restarted: place on it again
    inventory = inventory_of(client)
    if not inventory.workers:  # none at all (one died and is restarting): wait for one
        wait_for_a_worker(client)
        inventory = inventory_of(client)
    return client, inventory


def _plan_stretch(run: Run, fdg: Graph, resolved: Policy, config: RunConfig) -> _Placed:
    """The plan and the group programs of ``fdg`` under ``resolved``; what was asked for
    and cannot be used under it is said in ``run``."""
    plan = make_plan(fdg, resolved)
    run.fdg = fdg  # the cells this stretch runs (hot edits change them)
    programs = {
        g: group_program(
            plan, g, config.steps, config.own_random, config.allreduce, config.lanes, config.act_on_arrival
        )
        for g in plan.groups
    }
    if config.lanes and not placed_for_lanes(plan, programs):  # asked for, not used: say so
        run.note_once("not applied", NOT_PLACED_FOR_LANES)
    if config.act_on_arrival:
        check_act_on_arrival(plan, programs, run)
    return _Placed(fdg, resolved, plan, programs)


def _values_to_deploy(notebook: dict[str, Any], resolved: Policy) -> dict[str, Any]:
    """The notebook values as the replicas get them: in this process, their own copies, as
    on a cluster (a notebook object changed mid-stretch waits for %fdg update)."""
    return taken_at_deploy(notebook) if resolved.in_process else notebook


def _record_placement(run: Run, placed: _Placed) -> None:
    """The run's record names the placement and plan it now runs under."""
    if run.auto_table is None:  # under auto the name says which preset auto chose
        run.policy_name = placed.policy.name
    run.policy = placed.policy
    run.plan_text = placed.plan.explain()


def _deploy(backend, placed: _Placed, notebook: dict[str, Any], states) -> None:
    """Deploy the replicas with ``notebook`` (pickled once) and their ``states``; on a
    cluster, a notebook value that does not pickle (a lock, a generator) is named."""
    try:
        with quiet_dask_serialisation():  # a name that fails is said below, in one message
            backend.deploy(placed.plan, placed.programs, notebook, states)
    except Exception:
        if not placed.policy.in_process:
            check_notebook(notebook, readers_of(placed.fdg, notebook))
        raise


def _check_in_process_gpus(spec, fdg: Graph) -> None:
    """Refuse, before anything starts, a policy that runs a GPU group in this process when
    this process has no GPU (a cluster worker without one is refused as its inventory is read)."""
    if spec == "auto" or needs_cluster(spec):
        return
    placed = spec if isinstance(spec, Policy) else spec.place(fdg, None)
    placed.check_gpus_here(gpus_here)


def _fit_to_cluster(policy: Policy, inventory, run: Run) -> Policy:
    """A concrete policy whose workers have left is moved onto the workers there are (a
    preset is placed afresh on the current workers anyway)."""
    if inventory is None:
        return policy
    gone = [w for g in policy.groups for w in g.workers if w != IN_PROCESS and inventory.find(w) is None]
    if not gone:
        return policy
    moved = rehome(policy, inventory)
    run.note("re-placed", f"workers {', '.join(sorted(set(gone)))} are gone: moved their replicas to {moved!r}")
    return moved


def _groups_on(run: Run, workers) -> tuple[str, ...]:
    """The fragment groups the run had placed on ``workers``."""
    policy = run.policy
    return tuple(g.name for g in getattr(policy, "groups", ()) if set(g.workers) & set(workers))


def _check_not_repeating(run: Run, lost: WorkerLostError, last) -> None:
    """A process that dies again at the same iteration, holding the same fragments, is
    killed by what they run (native code crashing, a child calling os._exit, memory):
    retrying would only repeat it until "N workers were lost", so stop, naming them."""
    groups = _groups_on(run, lost.workers)
    if last is None or last != (lost.iteration, groups) or not groups:
        return
    raise ProcessDiedError(
        f"the process running {', '.join(map(repr, groups))} died again at iteration "
        f"{lost.iteration} (worker {', '.join(lost.workers)}), after being re-placed there: "
        "something these fragments' cells run ends their process — native code that crashes "
        "(a segfault, an abort), a thread or child process calling os._exit, or running out of "
        "memory. Run under policy inline to see where (the error names the cell), fix it, and run "
        "again."
    ) from lost


def _each(*hooks):
    """One ``on_snapshot`` hook calling each of ``hooks`` that is set (None: none is)."""
    hooks = [h for h in hooks if h is not None]
    if len(hooks) <= 1:
        return hooks[0] if hooks else None

    def on_snapshot(iteration: int, pickled) -> None:
        for hook in hooks:
            hook(iteration, pickled)

    return on_snapshot


def _clip_maker(run: Run, every: int | None, loggers: list, bar) -> ClipMaker | None:
    """The run's clips (``--video-every``): each kept in ``run.clips``, shown by the progress
    view and given to the loggers that take clips (TensorBoard's)."""
    if not every:
        return None
    takers = [x for x in [bar, *loggers] if callable(getattr(x, "clip", None))]

    def on_clip(clip: Clip) -> None:
        steps = run.env_steps_after(clip.iteration)
        if steps is not None:  # the whole run's count (the clip's state knows its first env replica's)
            clip = dataclasses.replace(clip, env_steps=steps)
        run.clips.append(clip)
        for taker in takers:
            try:
                taker.clip(clip)
            except Exception as exc:  # noqa: BLE001 — a view or logger failing must not end training
                run.note_once("clip not shown", f"{type(taker).__name__} could not take a clip: {exc}")

    gif = any(getattr(x, "wants_gif", False) for x in takers)
    maker = run.clip_maker = ClipMaker(every, on_clip, gif=gif)
    maker.start()  # its child imports while the run deploys
    return maker


def _loggers(loggers, log_dir: str | None) -> list:
    out = list(loggers)
    if log_dir is not None:
        from workbench.profiling.loggers import CSVLogger, TensorBoardLogger, tensorboard_available

        out.append(CSVLogger(os.path.join(log_dir, "metrics.csv")))
        if tensorboard_available():
            out.append(TensorBoardLogger(log_dir))
    return out
