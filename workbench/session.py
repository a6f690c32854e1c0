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
from workbench.runtime.run import Run

__all__ = ["FDG"]

DEFAULT_ITERATIONS = 100
DEFAULT_STEPS = 128


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
    def plan(self, policy: str | Policy | Any = "inline", cluster=None) -> Plan:
        """The plan ``run`` would execute: groups, their workers, and routes."""
        self.validate()
        inventory = None
        if needs_cluster(policy):
            from workbench.cluster.connect import connect, inventory_of

            inventory = inventory_of(connect(cluster, quiet=True).client)
        return make_plan(self, resolve_policy(policy, self, inventory))

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
    ) -> Run:
        """Train: ``iterations`` iterations of ``steps`` steps each under ``policy``.

        ``policy`` is ``"inline"`` (the calling process, no Dask), ``"coarse"``
        (SingleLearnerCoarse on the cluster), a preset object or a :class:`Policy`.
        ``cluster`` is a ``distributed.Client``, a scheduler address, or None (the
        notebook's client, else an embedded local cluster). With ``target_return``, the
        run stops once the mean of the last 20 episode returns reaches it.
        Returns a :class:`~workbench.runtime.run.Run`; the FDG is never modified.
        """
        _check_positive("iterations", iterations)
        _check_positive("steps", steps)
        ns = namespace if namespace is not None else (self.namespace or {})
        self.validate(ns)
        if not self._running.acquire(blocking=False):
            raise RunConfigError("this FDG is already running; stop it first (%fdg stop or fdg.stop()).")
        try:
            return self._run(iterations, steps, policy, cluster, ns, target_return, progress)
        finally:
            self._running.release()

    def stop(self) -> None:
        """Ask a running ``run`` (e.g. in another thread) to stop after the current iteration."""
        self._stop.set()

    def _run(self, iterations, steps, policy, cluster, ns, target_return, progress) -> Run:
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
        run = Run(resolved.name, iterations, steps, target_return=target_return, plan_text=plan.explain())
        self.last_run = run
        self._stop.clear()
        bar = _progress_bar(iterations, resolved.name) if progress else None

        def on_iteration(rec: IterationRecord) -> bool:
            run.record(rec)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(_postfix(run), refresh=False)
            return run.is_solved() or self._stop.is_set()

        try:
            run.started = time.perf_counter()  # the clock includes deploying the replicas
            backend.deploy(plan, programs, notebook)
            drive(plan, backend, iterations, on_iteration)
            run.status = "stopped" if self._stop.is_set() else ("solved" if run.solved_at else "finished")
        except KeyboardInterrupt:
            run.status = "interrupted"
            raise
        except BaseException as exc:
            run.status, run.error = "failed", exc
            raise
        finally:
            backend.teardown()
            if bar is not None:
                bar.close()
        return run

    # -- display -----------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from workbench.fdg.render import render_html

        return render_html(self)


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RunConfigError(f"--{name} must be a whole number ≥ 1, got {value!r}.")


def _progress_bar(total: int, policy: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"training ({policy})", unit="it", leave=True)


def _postfix(run: Run) -> str:
    mean = run.mean_return()
    ret = f"{mean:.0f}" if mean is not None else "–"
    return f"{run.steps_per_second:,.0f} env-steps/s · return {ret}"
