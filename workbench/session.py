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

import threading
import time
from collections.abc import Mapping
from typing import Any

from workbench.fdg import graph
from workbench.fdg.errors import RunConfigError
from workbench.fdg.plan import Plan, make_plan
from workbench.fdg.policy import Policy, as_policy_spec, needs_cluster, resolve_policy
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


class FDG(graph.FDG):
    """A fragmented dataflow graph you can run.

    ``namespace`` is where names no fragment writes come from (the notebook's variables;
    a script passes ``globals()``). It may also be given per run.
    """

    def __init__(self, fragments=(), namespace: Mapping[str, Any] | None = None) -> None:
        super().__init__(fragments)
        self.namespace = namespace
        self.last_run: Run | None = None
        self._stop = threading.Event()
        self._running = threading.Lock()

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
        resume: RunState | None = None,
        keep_state: bool = False,
        loggers=(),
        log_dir: str | None = None,
    ) -> Run:
        """Train: ``iterations`` iterations of ``steps`` steps each under ``policy``.

        ``policy`` is a preset name (``"inline"`` — the calling process, no Dask —,
        ``"coarse"``, ``"fine"``, ``"multilearner"``, ``"gpuonly"``, ``"async"``), ``"auto"``
        (try the presets on this cluster, keep the fastest), a ``FILE.json``, a preset
        object or a :class:`Policy`. ``cluster`` is a ``distributed.Client``, a scheduler
        address, or None (the notebook's client, else an embedded local cluster). With
        ``target_return``, the run stops once the mean of the last 20 episode returns
        reaches it. ``resume`` continues from another run's ``state`` (any policy);
        ``keep_state`` keeps this run's final state in ``run.state``.
        ``progress``: False, True (a progress bar), or a factory of live views
        (``%fdg run`` shows live Bokeh plots this way). ``loggers`` get each finished iteration's row (``log(row)``, then ``close()``);
        ``log_dir`` adds a ``CSVLogger(log_dir/metrics.csv)`` and, when tensorboard is
        installed, a ``TensorBoardLogger(log_dir)`` (see ``workbench.profiling``).
        Returns a :class:`~workbench.runtime.run.Run`; the FDG is never modified.
        """
        _check_positive("iterations", iterations)
        _check_positive("steps", steps)
        ns = namespace if namespace is not None else (self.namespace or {})
        self.validate(ns)
        policy = as_policy_spec(policy)  # a bad policy name or file fails before anything starts
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
            label = policy if isinstance(policy, str) else getattr(policy, "name", "custom")
            run = Run(label, iterations, steps, target_return=target_return)
            run.loggers = _loggers(loggers, log_dir)
            self.last_run = run
            bar = _make_progress(progress, iterations, label)
            try:
                if policy == "auto":
                    self._run_auto(run, iterations, steps, cluster, ns, bar, resume)
                else:
                    self._run(run, iterations, steps, policy, cluster, ns, bar, resume, keep_state)
                run.status = "stopped" if self._stop.is_set() else ("solved" if run.solved_at else "finished")
            except KeyboardInterrupt:
                run.status = "interrupted"
                raise
            except BaseException as exc:
                run.status, run.error = "failed", exc
                raise
            finally:
                if bar is not None:
                    bar.finish(run)
                for logger in run.loggers:
                    logger.close()
            return run
        finally:
            self._running.release()
            if handle is not None and handle.owned and handle.cluster is None:
                handle.close()  # a client this run opened to a scheduler address

    def stop(self) -> None:
        """Ask a running ``run`` (e.g. in another thread) to stop after the current iteration."""
        self._stop.set()

    def _run(self, run: Run, iterations: int, steps: int, policy, cluster, ns, bar,
             resume: RunState | None, keep_state: bool, *, stop_after=None) -> None:
        """One placement's stretch of a run: ``iterations`` iterations, recorded into ``run``."""
        inventory, handle = None, None
        policy = as_policy_spec(policy)  # an unknown name fails before any cluster starts
        if needs_cluster(policy):
            from workbench.cluster.connect import connect, inventory_of

            handle = connect(cluster)
            inventory = inventory_of(handle.client)
        resolved = resolve_policy(policy, self, inventory)
        plan = make_plan(self, resolved)
        notebook = {n: ns[n] for n in self.notebook_names() if n in ns}
        programs = {g: group_program(plan, g, steps) for g in plan.groups}
        if resolved.in_process:
            backend = InlineBackend()
        else:
            from workbench.cluster.backend import DaskBackend

            backend = DaskBackend(handle.client, inventory)
        if not run.policy_name.startswith("auto"):
            run.policy_name = resolved.name
        run.plan_text = plan.explain()
        start = resume.iteration if resume is not None else 0
        completed = 0

        def on_iteration(rec: IterationRecord) -> bool:
            nonlocal completed
            completed += 1
            run.record(rec)
            for logger in run.loggers:
                logger.log(run.rows[-1])
            if bar is not None:
                bar.advance(run)
            return (run.is_solved() or self._stop.is_set()
                    or (stop_after is not None and stop_after(completed)))

        try:
            if not run.rows:
                run.started = time.perf_counter()  # the clock includes deploying the replicas
            backend.deploy(plan, programs, notebook, _states_for(plan, resume))
            drive(plan, backend, iterations, on_iteration, start=start)
            if keep_state:
                run.state = _collect_state(plan, backend.export(), start + completed)
        finally:
            backend.teardown()

    def _run_auto(self, run: Run, iterations: int, steps: int, cluster, ns, bar, resume) -> None:
        """Try each applicable preset for a few iterations on the real cluster, continuing
        one learning state through all of them; then train on with the fastest."""
        from workbench.cluster.connect import connect, inventory_of
        from workbench.fdg.policy import auto_candidates

        inventory = inventory_of(connect(cluster).client)
        candidates = auto_candidates(self, inventory)
        trial = max(2, min(AUTO_TRIAL_ITERATIONS, (iterations - 1) // max(1, len(candidates))))
        state, table = resume, []
        for name, preset in candidates:
            if run.completed_iterations + trial >= iterations or run.is_solved() or self._stop.is_set():
                break
            first = len(run.rows)
            self._run(run, trial, steps, preset, cluster, ns, bar, state, True)
            state = run.state
            table.append({"policy": name, "env-steps/s": _steady_rate(run.rows[first:])})
        run.auto_table = table
        if not table:
            raise RunConfigError(f"--iterations {iterations} is too few for policy auto: it needs "
                                 f"more than {trial} per candidate policy.")
        best = max(table, key=lambda row: row["env-steps/s"])
        run.policy_name = f"auto → {best['policy']}"
        print(_auto_summary(table, best["policy"]))
        left = iterations - run.completed_iterations
        if left > 0 and not run.is_solved() and not self._stop.is_set():
            self._run(run, left, steps, dict(candidates)[best["policy"]], cluster, ns, bar, state, False)

    # -- display -----------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from workbench.fdg.render import render_html

        return render_html(self)


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
