"""``workbench sweep NOTEBOOK``: a notebook's FDG as a sweep, headless.

    $ workbench sweep notebooks/quickstart.ipynb --seeds 10
    $ workbench sweep notebooks/quickstart.ipynb --seeds 5 --set cfg.learning_rate=1e-3,3e-3 --early-stop
    $ workbench sweep notebooks/quickstart.ipynb --seeds 10 --cluster tcp://10.0.0.5:8786 \\
          --checkpoint-dir /shared/sweep --csv sweep.csv

``--set NAME.FIELD=V1,V2,…`` sweeps over the values listed; with one value it sets that
field for every trial (as ``workbench run --set`` does). The run options (``--iterations``,
``--steps``, ``--target-return``…) override the notebook's ``%fdg run`` line for every trial.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from typing import Any, Callable

from workbench.config import RunConfig, add_run_arguments, options_from
from workbench.errors import RunConfigError
from workbench.sweep.runner import sweep
from workbench.sweep.stopping import MedianStopping

__all__ = ["add_sweep_arguments", "sweep_command", "parse_set_values", "parse_sweep_line"]

#: the run options a sweep's trials take from the command line (the sweep decides the rest)
_TRIAL_OPTIONS = ("iterations", "steps", "target_return", "unit")


def add_sweep_arguments(parser: argparse.ArgumentParser, *, headless: bool = True) -> None:
    """The options of ``workbench sweep`` (``headless``) or of ``%fdg sweep`` (no notebook
    path, no --csv, no --workers: the notebook's cluster is used)."""
    if headless:
        parser.add_argument("notebook", help="path to a .ipynb with %%fragment cells")
    parser.add_argument(
        "--seeds",
        default="10",
        metavar="N|S1,S2,…",
        help="seeds 1..N, or the seeds listed (default 10); each sets --seed-key",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME.FIELD=V1,V2,…",
        dest="overrides",
        help="sweep a field of a notebook config object over the values listed (Python "
        "literals); one value sets it for every trial; repeat for more fields",
    )
    parser.add_argument(
        "--seed-key",
        default="cfg.seed",
        metavar="NAME.FIELD",
        help="the field that takes each trial's seed (default cfg.seed)",
    )
    parser.add_argument(
        "--trials-at-once",
        type=int,
        metavar="N",
        help="trials running together (default: every worker thread of the cluster)",
    )
    parser.add_argument(
        "--early-stop",
        action="store_true",
        help="stop trials whose best return is behind the median of the others' (after --grace iterations)",
    )
    parser.add_argument(
        "--grace",
        type=int,
        default=10,
        metavar="N",
        help="iterations each trial runs before --early-stop may stop it (default 10)",
    )
    add_run_arguments(parser, "cli", only=_TRIAL_OPTIONS + ("cluster", "checkpoint_dir", "checkpoint_every"))
    if not headless:
        parser.add_argument(
            "--background",
            action="store_true",
            help="sweep in a background thread; %%fdg stop stops it and returns its result",
        )
        return
    parser.add_argument("--csv", metavar="FILE", help="also write the table of trials to FILE")
    parser.add_argument(
        "--workers", type=int, metavar="N", help="workers of the embedded cluster (default: one per core, at least 2)"
    )
    parser.add_argument("--verbose", action="store_true", help="print the full traceback of an error")


def parse_sweep_line(line: str) -> tuple[dict[str, Any], bool]:
    """A ``%fdg sweep`` line as :func:`~workbench.sweep.runner.sweep`'s keywords, and
    whether ``--background`` was given. Every ``--set`` is swept (one value: a list of one).

    >>> parse_sweep_line("sweep --seeds 3 --set cfg.lr=1e-3,3e-3 --iterations 50")
    ({'over': {'cfg.lr': [0.001, 0.003]}, 'seeds': 3, 'seed_key': 'cfg.seed', 'iterations': 50}, False)
    """
    from workbench.fdg.options import LineParser, split_line

    parser = LineParser(prog="%fdg sweep", error_type=RunConfigError)
    add_sweep_arguments(parser, headless=False)
    words = split_line(line, RunConfigError)
    args = parser.parse_args(words[1:] if words[:1] == ["sweep"] else words)
    keywords: dict[str, Any] = {
        "over": dict(parse_set_values(t) for t in args.overrides),
        "seeds": _seeds(args.seeds),
        "seed_key": args.seed_key,
    }
    if args.trials_at_once is not None:
        keywords["trials_at_once"] = args.trials_at_once
    if args.early_stop:
        keywords["early_stop"] = MedianStopping(grace=args.grace)
    keywords.update(options_from(args))
    return keywords, bool(args.background)


def parse_set_values(text: str) -> tuple[str, list[Any]]:
    """``"cfg.lr=1e-3,3e-3"`` → ``("cfg.lr", [0.001, 0.003])``; values that are no Python
    literal are kept as written (``cfg.env_id=CartPole-v1,Acrobot-v1``).

    >>> parse_set_values("cfg.lr=1e-3,3e-3"), parse_set_values("cfg.env_id=CartPole-v1")
    (('cfg.lr', [0.001, 0.003]), ('cfg.env_id', ['CartPole-v1']))
    """
    key, eq, raw = text.partition("=")
    if not eq or not raw.strip():
        raise RunConfigError(f"--set {text!r}: write NAME.FIELD=V1,V2,…, e.g. --set cfg.learning_rate=1e-3,3e-3.")
    try:
        values = ast.literal_eval(f"[{raw}]")
    except (ValueError, SyntaxError):
        values = [part.strip() for part in raw.split(",")]
    if not values or any(v == "" for v in values):
        raise RunConfigError(f"--set {text!r}: a value is empty; list the values with commas between them.")
    return key.strip(), values


def _seeds(text: str) -> int | list[int]:
    try:
        value = ast.literal_eval(f"[{text}]")
    except (ValueError, SyntaxError):
        raise RunConfigError(
            f"--seeds {text!r}: give a number N (seeds 1..N) or seeds with commas, e.g. 1,2,7."
        ) from None
    return value[0] if len(value) == 1 else value


def sweep_command(args: argparse.Namespace, load_notebook: Callable) -> int:
    """Run the sweep ``args`` describe; 0 when every trial finished (and solved, with a
    target return), 1 when one did not, 130 when interrupted."""
    given = options_from(args)
    RunConfig(**{k: v for k, v in given.items() if k != "checkpoint_every"})  # every check, before loading
    over: dict[str, list] = {}
    fixed: list[str] = []
    for text in args.overrides:
        key, values = parse_set_values(text)
        if len(values) == 1:
            fixed.append(f"{key}={values[0]!r}")
        else:
            over[key] = values
    seeds = _seeds(args.seeds)
    if args.workers is not None:
        if args.workers < 1:
            raise RunConfigError(f"--workers must be a whole number ≥ 1, got {args.workers}.")
        from workbench.cluster.quiet_workers import WORKERS_OVERRIDE

        os.environ[WORKERS_OVERRIDE] = str(args.workers)
    if given.get("cluster") is None:
        from workbench.cluster.connect import start_embedded_in_background

        # its workers start while the notebook loads; the dashboard's pages at their first visit
        start_embedded_in_background(dashboard_later=True)
    fdg, options = load_notebook(args.notebook, overrides=fixed)
    options.update({k: v for k, v in given.items() if k in _TRIAL_OPTIONS})
    for name in ("policy", "cluster", "checkpoint_dir", "checkpoint_every", "resume", "progress", "loggers"):
        options.pop(name, None)  # the sweep decides these for its trials
    result = sweep(
        fdg,
        over,
        seeds=seeds,
        trials_at_once=args.trials_at_once,
        seed_key=args.seed_key,
        early_stop=MedianStopping(grace=args.grace) if args.early_stop else None,
        cluster=given.get("cluster"),
        checkpoint_dir=given.get("checkpoint_dir"),
        checkpoint_every=given.get("checkpoint_every"),
        **options,
    )
    print(result.summary())
    if args.csv:
        result.table.to_csv(args.csv)
        print(f"workbench: the table of trials is in {args.csv}.")
    if result.interrupted:
        print("workbench: sweep interrupted; the trials that finished are in the table.", file=sys.stderr)
        return 130
    wanted = {"solved"} if options.get("target_return") is not None else {"solved", "finished"}
    missed = [r.trial.index for r in result.trials.rows if r.status not in wanted | {"stopped early"}]
    if missed:
        print(
            f"workbench: trial{'s' if len(missed) > 1 else ''} {', '.join(map(str, missed))} did not "
            f"{'solve' if 'finished' not in wanted else 'finish'}.",
            file=sys.stderr,
        )
        return 1
    return 0
