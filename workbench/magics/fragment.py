"""The ``%%fragment`` cell magic and the ``%fdg`` line magic.

Each magic parses its line with the shared parsers (:mod:`workbench.fdg.options` for
``%%fragment``, :mod:`workbench.config` for ``%fdg run``, whose options are
:class:`~workbench.config.RunConfig`'s fields), calls
one method of the notebook's :class:`workbench.FDG`, and shows the result. Domain errors
become ``UsageError``s (a short red message, no traceback); the FDG is left as it was.
"""

from __future__ import annotations

import difflib
import html

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import HTML, display

from workbench.config import DEFAULT_STEPS, RUN_USAGE, parse_place_line, parse_run_line
from workbench.errors import FragmentError, WorkbenchError
from workbench.evaluation.options import parse_evaluate_line
from workbench.fdg.options import FRAGMENT_USAGE, parse_fragment_line, without_comment
from workbench.fdg.policy import needs_cluster
from workbench.magics.background import BackgroundRun
from workbench.session import FDG
from workbench.sweep.background import BackgroundSweep
from workbench.sweep.command import parse_sweep_line
from workbench.sweep.runner import sweep

__all__ = ["WorkbenchMagics"]

_FDG_HELP = f"""Show, run or change the notebook's fragmented dataflow graph (FDG).

%fdg                  draw the graph: fragments, the names flowing between them, rates
%fdg run [options]    train on the cluster (progress bar; returns the Run). Without
                      --policy: the placement board's policy (fdg.placement) when one
                      was placed, else inline; without --steps: the board's steps
%fdg run --background ...   train in a background thread; %fdg stop ends it
%fdg stop             stop the background run after its current iteration and return its
                      record (also one that failed or ended by itself: run.error has why)
%fdg update NAME …    send the notebook's current values of NAME … (e.g. cfg after
                      cfg.ent_coef = 0.02) to the running replicas: they apply at the
                      next iteration boundary, every fragment's state kept. Re-running
                      a %%fragment cell during a run applies the new cell the same way
%fdg profile          the last run's time per fragment and replica (compute, waiting, sending)
%fdg evaluate [--episodes N] [--seed S]   play the last run's final state N episodes (10)
                      without learning, greedily, on held-out env seeds: returns, mean, IQM
%fdg show [--episodes N] [--seed S]   the same as a video of the first env (1 episode)
%fdg policy           show the active policy (the last run's) and its plan
%fdg policy --policy P [--steps T]   the plan P makes of this FDG (with --steps: bytes
                      moved per iteration, measured by one short inline run)
%fdg place [--cluster ADDRESS] [--steps T]
                      the placement board: drag fragments onto the cluster's workers and
                      devices, set replica counts, start from a preset, import/export
                      JSON; returns the board (board.policy is its wb.Policy)
%fdg sweep [--seeds N] [--set cfg.lr=1e-3,3e-3] [--early-stop] [--background] [run options]
                      train many trials (settings × seeds) at once on the cluster, with a
                      live table; returns the SweepResult (docs/sweeps.md)
%fdg reset            forget every fragment (and the board's placement)
%fdg help             this help (also %fdg?)

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
        self._background: BackgroundRun | None = None
        self._board = None  # the last %fdg place board: a new one closes it
        self._sweep: BackgroundSweep | None = None  # a %fdg sweep --background, until %fdg stop

    @cell_magic
    def fragment(self, line: str, cell: str):
        try:
            options = parse_fragment_line(line)
            fragment = self.fdg.add_fragment(code=cell, **options)
        except WorkbenchError as exc:
            raise _usage_error(exc) from None
        print(fragment.summary())
        self._say_background_failure()

    fragment.__doc__ = (
        "Register this cell as one rate of a fragment of the FDG.\n\n"
        "Re-running the cell replaces that rate of the fragment. The cell's code is not run "
        "here: it runs on the cluster, per replica, when the FDG runs.\n\n" + FRAGMENT_USAGE
    )

    @line_magic
    def fdg(self, line: str = ""):
        words = without_comment(line).split(maxsplit=1)
        command = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        try:
            if command == "":
                return self.fdg
            if command == "run":
                return self._run(rest)
            if command == "stop":
                return self._stop_sweep() if self._sweep is not None else self._stop()
            if command == "sweep":
                return self._start_sweep(rest)
            if command == "update":
                return self._update(rest)
            if command == "profile":
                if self.fdg.last_run is None:
                    raise UsageError("nothing has run yet: %fdg run first, then %fdg profile.")
                return self.fdg.last_run.profile()
            if command in ("evaluate", "show"):
                return self._evaluate(command, rest)
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
                plan = self.fdg.plan(
                    options.get("policy", "inline"), options.get("cluster"), steps=options.get("steps")
                )
                display(HTML(f"<pre>{html.escape(plan.explain())}</pre>"))
                return None
            if command in ("help", "--help", "-h"):
                print(_FDG_HELP)
                return None
        except WorkbenchError as exc:
            raise _usage_error(exc) from None
        raise UsageError(_unknown_command(command))

    fdg.__doc__ = _FDG_HELP

    def _run(self, rest: str):
        options = parse_run_line(rest)
        background = options.pop("background", False)
        if self._background is not None and self._background.alive:
            raise UsageError("a background run is going; stop it first with %fdg stop.")
        placement = getattr(self.fdg, "placement", None)
        if "policy" not in options and placement is not None:
            options["policy"] = placement
            print(f"policy: the placement board's, {placement!r} (--policy P runs another)")
        board_steps = getattr(self.fdg, "placement_steps", None)
        if "steps" not in options and board_steps is not None:
            options["steps"] = board_steps
            print(f"steps: the placement board's, {board_steps} per iteration (--steps T runs another)")
        if "steps" not in options:
            print(f"steps: the default, {DEFAULT_STEPS} per iteration (--steps T runs another)")
        if options.get("progress", True) is True:
            options["progress"] = self._live_view
        self._say_background_failure(starting=background)
        if not background:
            try:
                return self.fdg.run(**options)
            except KeyboardInterrupt:
                # the interrupt's one line; the partial record is the cell's result
                run = self.fdg.last_run
                done = run.completed_iterations if run is not None else 0
                # an inline run (no --cluster) had no cluster to keep: it is not mentioned
                cluster = needs_cluster(options.get("policy", "inline")) or options.get("cluster") is not None
                kept = " and the cluster kept" if cluster else ""
                # the first Ctrl-C stops at a boundary: the state came back (r.checkpoint works)
                state = ", its state kept" if run is not None and run.state is not None else ""
                print(
                    f"workbench: interrupted after {done} iteration{'s' if done != 1 else ''}; "
                    f"every replica was stopped{kept}{state}. The run so far is this cell's result.",
                    flush=True,
                )
                return run
        self._background = BackgroundRun(self.fdg, options)
        run = self._background.start()
        if run is not None or self._background.alive:  # else refused: the thread said why
            held = (
                "this cell's result is its record, live (run.status, run.metrics)"
                if run is not None
                else "fdg.last_run is its record once it starts"
            )
            print(f"training in the background; {held}; %fdg stop ends it.")
        return run

    def _say_background_failure(self, *, starting: bool = False) -> None:
        """A failed background run was said only in the cell that started it, maybe far up
        the notebook: the next edit, update or run says so once."""
        line = self._background.failure_notice(starting=starting) if self._background is not None else None
        if line is not None:
            print(line, flush=True)

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

    def _evaluate(self, command: str, rest: str):
        options = parse_evaluate_line(rest, default_episodes=10 if command == "evaluate" else 1)
        if self.fdg.last_run is None:
            raise UsageError(f"nothing has run yet: %fdg run first, then %fdg {command}.")
        run = self.fdg.last_run
        return run.evaluate(**options) if command == "evaluate" else run.show(**options)

    def _update(self, rest: str):
        names = rest.split()
        if not names:
            raise UsageError("%fdg update NAME [NAME …]: name the notebook values to send, e.g. %fdg update cfg")
        missing = [n for n in names if n not in self.shell.user_ns]
        if missing:
            raise UsageError(f"%fdg update: {', '.join(missing)} not defined in the notebook.")
        at = self.fdg.update(**{n: self.shell.user_ns[n] for n in names})
        if at is None:
            print("nothing is running: the next run reads these values anyway.")
            self._say_background_failure()

    def _start_sweep(self, rest: str):
        keywords, background = parse_sweep_line(rest)
        if not background:
            return sweep(self.fdg, **keywords)  # Ctrl-C stops it and returns the trials so far
        if self._sweep is not None and self._sweep.alive:
            raise UsageError("a background sweep is going; stop it first with %fdg stop.")
        self._sweep = BackgroundSweep(self.fdg, keywords)
        self._sweep.start()
        print("sweeping in the background; %fdg stop stops it and returns its result.")
        return None

    def _stop_sweep(self):
        job, self._sweep = self._sweep, None
        return job.stop()

    def _stop(self):
        """The background run's record, never a foreground run's (fdg.last_run may be one).
        Once handed over, the run is forgotten: a second stop has nothing to stop or say."""
        job = self._background
        if job is None:
            print("nothing is running.")
            return None
        if job.alive:
            record = job.stop()
        else:
            print(job.ended_line())
            record = job.record
        if not job.alive:
            self._background = None
        return record


def _unknown_command(command: str) -> str:
    """One line, with the closest command when there is one (the help is one command away)."""
    close = difflib.get_close_matches(command.lower(), _COMMANDS, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else f" The commands: {', '.join(_COMMANDS)}."
    return f"unknown %fdg command {command!r}.{hint} %fdg help lists what each does."


_COMMANDS = ("run", "stop", "update", "profile", "evaluate", "show", "policy", "place", "sweep", "reset", "help")
