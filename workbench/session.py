"""``workbench.FDG``: the graph plus its namespace — what a notebook or a script builds.

The pure :class:`workbench.fdg.graph.Graph` holds fragments and interfaces; ``FDG`` adds
the namespace its cells read (the notebook's variables, or a script's ``globals()``), the
placement board's policy, and the last run. Training is the
:class:`~workbench.trainer.Trainer`'s job; ``fdg.run(**options)`` is the one-line way to
make one and run it. Everything ``%%fragment`` and ``%fdg`` do goes through here.

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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.errors import RunConfigError
from workbench.fdg.fragment import default_rate
from workbench.fdg.graph import Graph
from workbench.fdg.plan import MeasuredSizes, Plan, make_plan
from workbench.fdg.policy import Policy, as_policy_spec, needs_cluster, resolve_policy
from workbench.live_edits import init_edit_notice, init_only_changes, init_only_notice
from workbench.runtime.values.arrays import nbytes
from workbench.runtime.process.interrupts import first_interrupt_stops

if TYPE_CHECKING:
    from workbench.config import RunConfig
    from workbench.runtime.state.run import Run
    from workbench.trainer import Trainer

__all__ = ["FDG"]


#: the notice's iteration is a lower bound: a replica that began the next iteration
#: before the change puts the boundary after it; the run's notes say the exact one
_EXACT_LATER = "at the earliest (replicas that had begun later ones finish them first; run.events names the exact one)."


class FDG(Graph):
    """A fragmented dataflow graph with the namespace its cells read; it can run.

    ``namespace`` is where names no fragment writes come from (the notebook's variables;
    a script passes ``globals()``). It may also be given per run.
    """

    def __init__(self, fragments=(), namespace: Mapping[str, Any] | None = None) -> None:
        super().__init__(fragments)
        if namespace is not None and not isinstance(namespace, Mapping):  # else it fails deep in a run
            raise RunConfigError(
                f"namespace must be a dict of the notebook's names (globals() in a "
                f"script) or None, not {type(namespace).__name__}."
            )
        self.namespace = namespace
        self._last_run: Run | None = None
        #: the placement board's policy (``%fdg place``); ``%fdg run`` uses it by default
        self.placement: Policy | None = None
        #: the board's steps per iteration (the T its traffic is shown for); ``%fdg run``
        #: uses it when no ``--steps`` is given, so the run is the one the board showed
        self.placement_steps: int | None = None
        self._trainer: Trainer | None = None
        self._running = threading.Lock()
        #: runs between their call and their trainer, and whether a stop was asked then
        #: (``stop`` while a run starts is honoured before anything deploys)
        self._control = threading.Lock()
        self._starting = 0
        self._stop_asked = False

    @classmethod
    def from_checkpoint(cls, checkpoint, namespace: Mapping[str, Any] | None = None) -> "FDG":
        """The FDG a checkpoint was written from, rebuilt from its cells. ``checkpoint``:
        a loaded :class:`~workbench.runtime.state.checkpoint.Checkpoint` or its directory."""
        if not hasattr(checkpoint, "cells"):
            from workbench.runtime.state.checkpoint import load_checkpoint

            checkpoint = load_checkpoint(checkpoint)
        fdg = cls(namespace=namespace)
        for cell in checkpoint.cells:
            fdg.add_fragment(
                cell["fragment"],
                cell["code"],
                rate=cell["rate"],
                replicas=cell.get("replicas"),
                device=cell.get("device") or "cpu",
                reads=cell.get("reads", ()),
                writes=cell.get("writes", ()),
            )
        return fdg

    def copy(self) -> "FDG":
        return FDG(self.fragments.values(), self.namespace)

    # -- live changes ------------------------------------------------------------------
    def add_fragment(self, name: str, code: str, **options):
        """Register (or replace) a cell, as :meth:`Graph.add_fragment <workbench.fdg.graph.Graph.add_fragment>`.

        During a run the new cell applies at the next iteration boundary, every fragment's
        state kept (weights, optimiser, envs mid-episode, counters); an edit the running
        placement cannot run is refused and the old cells keep running. Re-running the old
        cell undoes it the same way.
        """
        trainer = self._trainer
        if trainer is None or trainer.run_record is None:
            return super().add_fragment(name, code, **options)
        trial = Graph(self.fragments.values())
        old = self.fragments.get(name)
        fragment = Graph.add_fragment(trial, name, code, **options)
        trainer.check_change(trial)  # raises: the run goes on with the old cells
        rate = options.get("rate") or default_rate(name)
        what = f"{name}: new {rate} cell"
        if rate == "init":  # which names it gives first values, which keep theirs (live_edits)
            what = f"{what} ({init_edit_notice(old, fragment)})"
        with trainer.lock:  # the edit and its notice together: it lands where the notice says
            fragment = super().add_fragment(name, code, **options)
            at = trainer.apply_at_boundary("edited", what)
        if at is None:  # the run ended meanwhile (tearing down): the cell is for the next run
            print(f"workbench: {name}: new {rate} cell, for the next run: this one has ended.", flush=True)
        else:
            print(f"workbench: {what}, applies from iteration {at} {_EXACT_LATER}", flush=True)
        return fragment

    def remove_fragment(self, name: str) -> None:
        if self._trainer is not None:
            raise RunConfigError(
                f"cannot remove fragment {name!r} while the FDG runs; stop the run first (%fdg stop or fdg.stop())."
            )
        super().remove_fragment(name)

    def clear(self) -> None:
        if self._trainer is not None:
            raise RunConfigError("cannot clear the FDG while it runs; stop the run first (%fdg stop or fdg.stop()).")
        super().clear()

    def update(self, **values) -> int | None:
        """Send changed notebook values to the running replicas at the next iteration
        boundary (``fdg.update(cfg=cfg)``; ``%fdg update cfg`` in a notebook). The
        fragments' own state is kept; cells read the new values from then on. Without a
        run the values are just set. Returns the iteration they apply from (None idle).

        Init cells do not run again: a changed part that only init cells read (``cfg.hidden``
        building the network) takes effect at the next run, and the notice names it and
        those cells (:func:`workbench.live_edits.init_only_changes`).

        >>> fdg = wb.FDG(namespace={"scale": 1.0})     # doctest: +SKIP
        >>> fdg.update(scale=0.5)                      # doctest: +SKIP
        """
        trainer = self._trainer
        namespace = trainer.namespace if trainer is not None else self.namespace
        if namespace is None:
            self.namespace = namespace = {}
        read = set(self.notebook_names())
        unread = sorted(set(values) - read)
        if unread:
            raise RunConfigError(
                f"no fragment reads {', '.join(unread)}; the fragments read these "
                f"notebook names: {', '.join(sorted(read)) or 'none'}."
            )
        if trainer is None or trainer.run_record is None:
            namespace.update(values)
            return None
        names = ", ".join(sorted(values))
        later = init_only_changes(self, trainer, values)  # parts only init cells read: next run
        what = f"new value of {names}"
        if later:
            what += f" ({', '.join(label for label, _ in later)} read only by init cells: from the next run)"
        with trainer.lock:  # the values and their notice together, as an edit's
            namespace.update(values)
            at = trainer.apply_at_boundary("updated", what)
            trainer.mark_sent(values)  # the next stretch takes these as they are; the rest as given
        if at is None:
            print(f"workbench: new value of {names}, for the next run: this one has ended.", flush=True)
            return None
        # a value nothing but init cells reads applies from no iteration of this run
        now = [n for n in sorted(values) if n not in {label for label, _ in later}]
        said = f"applies from iteration {at} {_EXACT_LATER}" if now else ""
        if later:
            said = f"{said} {init_only_notice(later)}".strip()
        print(f"workbench: new value of {names}{', ' if now else ': '}{said}", flush=True)
        return at

    # -- planning ----------------------------------------------------------------------
    def plan(self, policy: str | Policy | Any = "inline", cluster=None, *, steps: int | None = None) -> Plan:
        """The plan a run under ``policy`` would execute: groups, their workers, and routes.

        With ``steps``, the plan also shows the bytes each route moves per iteration of
        ``steps``: measuring them runs one inline iteration of one step
        (:meth:`measure_sizes`).
        """
        self.validate(self.namespace or {})
        inventory = None
        if needs_cluster(policy):
            from workbench.cluster.connect import connect, inventory_of
            from workbench.cluster.restarts import wait_for_restarts

            handle = connect(cluster, quiet=True)
            wait_for_restarts(handle.client)  # a worker a stuck cell's stop restarted: plan on it too
            inventory = inventory_of(handle.client)
            if handle.owned and handle.cluster is None:
                handle.close()  # a client opened just to read the workers of an address
        plan = make_plan(self, resolve_policy(policy, self, inventory))
        if steps is not None:
            plan.measured = (self.measure_sizes(), steps)
        return plan

    def measure_sizes(self) -> MeasuredSizes:
        """Bytes of every value a fragment writes, after one inline iteration of one step:
        arrays, tensors and numbers, and lists, tuples and dicts of them (nested) by what
        they hold. A list, tuple or dict that holds nothing yet (``batches = []`` until a
        warm-up ends) has no size to measure: it is left out, and named in ``.empty``, so
        the plan says its size is not known instead of 0 B.

        >>> import numpy as np, workbench as wb
        >>> fdg = wb.FDG(namespace={"np": np})
        >>> _ = fdg.add_fragment("env", "pair = (np.zeros(4), [1.0, 2.0])\\nbatches = []")
        >>> sizes = fdg.measure_sizes()
        >>> sizes["pair"], sorted(sizes.empty)
        (48, ['batches'])
        """
        probe = self.copy()
        run = probe.run(iterations=1, steps=1, progress=False, keep_state=True, run_store="off")
        sizes: dict[str, int] = {}
        empty: set[str] = set()
        for replicas in run.state.fragments.values():
            for name, value in replicas[0].items():
                size = nbytes(value)
                if size == 0 and isinstance(value, (list, tuple, dict)):
                    empty.add(name)  # (a reader's copy may be empty where the writer's is not)
                else:
                    sizes[name] = max(sizes.get(name, 0), size)
        return MeasuredSizes(sizes, empty=empty)

    # -- running -----------------------------------------------------------------------
    def run(
        self, config: "RunConfig | None" = None, /, *, namespace: Mapping[str, Any] | None = None, **options
    ) -> "Run":
        """Train this FDG; return the :class:`~workbench.runtime.state.run.Run` record.

        The options are :class:`~workbench.config.RunConfig`'s fields — ``iterations``,
        ``steps``, ``policy``, ``cluster``, ``target_return``, ``resume``,
        ``checkpoint_dir``, ``checkpoint_every``, ``snapshot_every``, ``keep_state``,
        ``log_dir``, ``progress``, ``loggers`` — given as keywords or as a ``RunConfig``
        (``help(workbench.config.RunConfig)`` documents each). ``namespace`` replaces the
        FDG's own for this run. The FDG is never modified.

        >>> run = fdg.run(iterations=60, steps=32, policy="coarse", target_return=475)  # doctest: +SKIP
        """
        with self._control:  # from here a stop reaches this run (see stop)
            self._starting += 1
        try:
            return self._run(config, namespace, options)
        finally:
            with self._control:
                self._starting -= 1
                self._stop_asked = self._stop_asked and self._starting > 0

    def _run(self, config, namespace, options) -> "Run":
        from workbench.config import RunConfig
        from workbench.trainer import Trainer

        if config is None:
            config = RunConfig.from_options(options)
        elif options:
            config = config.replace(**options)
        if not isinstance(config, RunConfig):
            raise RunConfigError(f"fdg.run takes a RunConfig or keyword options, not {type(config).__name__}.")
        if namespace is not None and not isinstance(namespace, Mapping):
            raise RunConfigError(
                f"namespace must be a mapping of names to values (a script passes "
                f"globals()), not {type(namespace).__name__}."
            )
        trainer = Trainer(self, config, namespace=namespace)
        trainer.prepare()  # a run refused by its checks leaves last_run as it was
        from workbench.run_store.keeper import RunKeeper

        keeper = RunKeeper(config, self, trainer.namespace)  # a folder that is no run store refuses the run now
        if not self._running.acquire(blocking=False):
            raise RunConfigError("this FDG is already running; stop it first (%fdg stop or fdg.stop()).")
        with self._control:
            self._trainer = trainer
            if self._stop_asked:  # asked while it started: it stops before deploying
                self._stop_asked = False
                trainer.stop()
        try:
            with first_interrupt_stops(trainer.stop) as ctrl_c:  # a foreground run's first Ctrl-C
                run = trainer.run()
            if ctrl_c.pressed:  # stopped at a boundary, its state and final checkpoint kept
                run.status = "interrupted"
                raise KeyboardInterrupt
            return run
        finally:
            self._last_run = trainer.run_record or self._last_run
            self._trainer = None
            self._running.release()
            keeper.keep(trainer.run_record)  # finished, stopped or failed: its record in the run store

    @property
    def last_run(self) -> "Run | None":
        """The running run's record while one trains, else the last run's (also a failed
        one's: ``fdg.last_run.error`` holds why)."""
        trainer = self._trainer
        if trainer is not None and trainer.run_record is not None:
            return trainer.run_record
        return self._last_run

    @last_run.setter
    def last_run(self, run: "Run | None") -> None:
        self._last_run = run

    @property
    def running(self) -> bool:
        """True while ``run`` is training (in this thread or another), connecting and
        deploying included; ``last_run`` is that run's record all the while."""
        return self._running.locked() and self._trainer is not None

    def replace(self, policy: str | Policy | Any) -> None:
        """Re-place a running run under ``policy`` at its next iteration boundary.

        Every fragment's state (weights, optimiser state, envs, random generators) moves to
        the new placement and training continues. Raises :class:`RunConfigError` when
        nothing is running, or for a policy that does not fit this FDG.
        """
        spec = as_policy_spec(policy)
        if isinstance(spec, Policy):
            spec.check(self)
        trainer = self._trainer
        if trainer is None:
            raise RunConfigError(
                "nothing is running: replace() moves a running run's fragments. Pass the policy to run() instead."
            )
        trainer.replace(spec)
        # said now, as an edit's or an update's notice is; the run says again when it lands
        print(
            f"workbench: re-placing the run under {getattr(spec, 'name', spec)} at its next iteration "
            "boundary (the state moves with the fragments).",
            flush=True,
        )

    def stop(self) -> None:
        """Ask a running ``run`` (e.g. in another thread) to stop after the current iteration.

        A run counts from the moment ``run()`` is called: one still starting (importing,
        checking, connecting to its cluster) stops before it deploys anything, with no
        iteration run (status ``"stopped"``). Without a run nothing happens."""
        with self._control:
            trainer = self._trainer
            if trainer is None:
                self._stop_asked = self._starting > 0
                return
        trainer.stop()

    # -- display -----------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from workbench.fdg.render import render_html

        return render_html(self)
