"""The ``%%fragment`` cell magic and the ``%fdg`` line magic.

Each magic parses its line with the shared parsers (:mod:`workbench.fdg.options` for
``%%fragment``, :mod:`workbench.config` for ``%fdg run``, whose options are
:class:`~workbench.config.RunConfig`'s fields), calls
one method of the notebook's :class:`workbench.FDG`, and shows the result. Domain errors
become ``UsageError``s (a short red message, no traceback); the FDG is left as it was.
"""
from __future__ import annotations

import html
import threading
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import HTML, display

from workbench.errors import FragmentError, WorkbenchError
from workbench.config import RUN_USAGE, parse_place_line, parse_run_line
from workbench.runtime.driver import STOP_GRACE_S
from workbench.fdg.options import FRAGMENT_USAGE, parse_fragment_line
from workbench.session import FDG

__all__ = ["WorkbenchMagics"]

_FDG_HELP = f"""Show, run or change the notebook's fragmented dataflow graph (FDG).

%fdg                  draw the graph: fragments, the names flowing between them, rates
%fdg run [options]    train on the cluster (progress bar; returns the Run). Without
                      --policy: the placement board's policy (fdg.placement) when one
                      was placed, else inline; without --steps: the board's steps
%fdg run --background ...   train in a background thread; %fdg stop ends it
%fdg stop             stop a background run after its current iteration
%fdg update NAME …    send the notebook's current values of NAME … (e.g. cfg after
                      cfg.ent_coef = 0.02) to the running replicas: they apply at the
                      next iteration boundary, every fragment's state kept. Re-running
                      a %%fragment cell during a run applies the new cell the same way
%fdg profile          the last run's time per fragment and replica (compute, waiting, sending)
%fdg policy           show the active policy (the last run's) and its plan
%fdg policy --policy P [--steps T]   the plan P makes of this FDG (with --steps: bytes
                      moved per iteration, measured by one short inline run)
%fdg place [--cluster ADDRESS] [--steps T]
                      the placement board: drag fragments onto the cluster's workers and
                      devices, set replica counts, start from a preset, import/export
                      JSON; returns the board (board.policy is its wb.Policy)
%fdg reset            forget every fragment (and the board's placement)

Options of %fdg run:
{RUN_USAGE}"""


def _usage_error(exc: WorkbenchError) -> UsageError:
    text = str(exc)
    if isinstance(exc, FragmentError) and exc.line and "line" not in text:
        text = f"{text} (cell line {exc.line})"
    return UsageError(text)


@magics_class
class WorkbenchMagics(Magics):
    """Holds the notebook's FDG; names no fragment writes come from the user namespace."""

    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.fdg = FDG(namespace=shell.user_ns)
        self._background: threading.Thread | None = None
        self._board = None  # the last %fdg place board: a new one closes it

    @cell_magic
    def fragment(self, line: str, cell: str):
        try:
            options = parse_fragment_line(line)
            fragment = self.fdg.add_fragment(code=cell, **options)
        except WorkbenchError as exc:
            raise _usage_error(exc) from None
        print(fragment.summary())

    fragment.__doc__ = (
        "Register this cell as one rate of a fragment of the FDG.\n\n"
        "Re-running the cell replaces that rate of the fragment. The cell's code is not run "
        "here: it runs on the cluster, per replica, when the FDG runs.\n\n" + FRAGMENT_USAGE
    )

    @line_magic
    def fdg(self, line: str = ""):
        words = line.split(maxsplit=1)
        command = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        try:
            if command == "":
                return self.fdg
            if command == "run":
                return self._run(rest)
            if command == "stop":
                return self._stop()
            if command == "update":
                return self._update(rest)
            if command == "profile":
                if self.fdg.last_run is None:
                    raise UsageError("nothing has run yet: %fdg run first, then %fdg profile.")
                return self.fdg.last_run.profile()
            if command == "reset":
                self.fdg.clear()
                self.fdg.placement = self.fdg.placement_steps = None
                print("FDG reset: no fragments.")
                return None
            if command == "place":
                return self._place(rest)
            if command == "policy":
                options = parse_run_line(rest)
                last = self.fdg.last_run
                if "policy" not in options and last is not None:
                    print(f"active policy: {last.policy_name} (the last run's)\n{last.plan_text}")
                    return None
                plan = self.fdg.plan(options.get("policy", "inline"), options.get("cluster"),
                                     steps=options.get("steps"))
                display(HTML(f"<pre>{html.escape(plan.explain())}</pre>"))
                return None
        except WorkbenchError as exc:
            raise _usage_error(exc) from None
        raise UsageError(f"unknown %fdg command {command!r}.\n\n{_FDG_HELP}")

    fdg.__doc__ = _FDG_HELP

    def _run(self, rest: str):
        options = parse_run_line(rest)
        background = options.pop("background", False)
        if self._background is not None and self._background.is_alive():
            raise UsageError("a background run is going; stop it first with %fdg stop.")
        placement = getattr(self.fdg, "placement", None)
        if "policy" not in options and placement is not None:
            options["policy"] = placement
            print(f"policy: the placement board's, {placement!r} (--policy P runs another)")
        board_steps = getattr(self.fdg, "placement_steps", None)
        if "steps" not in options and board_steps is not None:
            options["steps"] = board_steps
            print(f"steps: the placement board's, {board_steps} per iteration (--steps T runs another)")
        if options.get("progress", True) is True:
            options["progress"] = self._live_view
        if not background:
            try:
                return self.fdg.run(**options)
            except KeyboardInterrupt:
                # the interrupt's one line; the partial record is the cell's result
                run = self.fdg.last_run
                done = run.completed_iterations if run is not None else 0
                print(f"workbench: interrupted after {done} iteration{'s' if done != 1 else ''}; "
                      "every replica was stopped and the cluster kept. The run so far is this "
                      "cell's result.", flush=True)
                return run
        self._background = threading.Thread(
            target=self._run_in_background, kwargs=options, name="workbench-run", daemon=True)
        self._background.start()
        print("training in the background; %fdg stop ends it and returns the run's record.")
        return None

    def _run_in_background(self, **options) -> None:
        """A background run's error is said in one line where the run was started (the
        whole error, traceback included, stays in the run's record: ``%fdg stop`` returns it)."""
        try:
            self.fdg.run(**options)
        except WorkbenchError as exc:
            print(f"workbench: the background run failed: {exc}", flush=True)
        except BaseException as exc:  # noqa: BLE001 — a thread must not die with a raw traceback
            print(f"workbench: the background run failed: {type(exc).__name__}: {exc}", flush=True)

    def _place(self, rest: str):
        """The placement board for the notebook's FDG (a new one replaces the last)."""
        from workbench.widgets.placement import PlacementBoard

        options = parse_place_line(rest)
        self.fdg.validate()  # no fragments, or a graph that cannot run: say so before connecting
        if self._board is not None:
            self._board.close()
        self._board = PlacementBoard(self.fdg, options.get("cluster"), steps=options.get("steps"))
        return self._board

    def _live_view(self, total: int, label: str):
        """Show a live view (progress + Bokeh plots) in the cell's output; a text bar when
        the Bokeh widget extension is not installed."""
        try:
            from workbench.widgets.live import LiveView
        except ImportError:  # jupyter_bokeh missing: the plain progress bar still works
            from workbench.progress import TextProgress

            return TextProgress(total, label)
        view = LiveView(total, label)
        display(view.widget)
        return view

    def _update(self, rest: str):
        names = rest.split()
        if not names:
            raise UsageError("%fdg update NAME [NAME …]: name the notebook values to send, e.g. "
                             "%fdg update cfg")
        missing = [n for n in names if n not in self.shell.user_ns]
        if missing:
            raise UsageError(f"%fdg update: {', '.join(missing)} not defined in the notebook.")
        at = self.fdg.update(**{n: self.shell.user_ns[n] for n in names})
        if at is None:
            print("nothing is running: the next run reads these values anyway.")
        return None

    def _stop(self):
        thread = self._background
        if thread is None or not thread.is_alive():
            last = self.fdg.last_run
            if thread is not None and last is not None and last.error is not None:
                print(f"nothing is running: the background run {last.status} "
                      f"({type(last.error).__name__}); returning its record (run.error has why).")
                return last
            if thread is not None and last is not None:  # it ended on its own before the stop
                print(f"nothing is running: the background run ended by itself ({last.summary()}); "
                      "returning its record.")
                return last
            print("nothing is running.")
            return None
        # a stuck cell costs the run's grace (named when it passes) and a worker restart;
        # asked again while it lasts: a thread that has yet to call fdg.run gets it too
        deadline = time.monotonic() + 3 * STOP_GRACE_S + 60
        while thread.is_alive() and time.monotonic() < deadline:
            self.fdg.stop()
            thread.join(timeout=0.05)
        if thread.is_alive():
            print("workbench: the run has not stopped yet; it goes on stopping in the background "
                  "(%fdg stop again to wait for it).")
            return None
        return self.fdg.last_run
