"""The option lines of ``%%fragment`` and ``%fdg run``, parsed without IPython.

The magics, the headless runner (which reads them from a notebook's cells) and
:func:`workbench.algorithms.ppo.build_fdg` share these parsers, so a line means the same
thing everywhere.

Example:
    >>> parse_fragment_line("actor --replicas 2")
    {'name': 'actor', 'rate': None, 'replicas': 2, 'device': None, 'reads': [], 'writes': []}
    >>> parse_run_line("run --iterations 60 --steps 32")["iterations"]
    60
"""
from __future__ import annotations

import argparse
import shlex

from workbench.fdg.errors import FragmentOptionError, RunConfigError

__all__ = ["parse_fragment_line", "parse_run_line", "parse_place_line", "add_checkpoint_options",
           "FRAGMENT_USAGE", "RUN_USAGE", "PLACE_USAGE"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the process."""

    def __init__(self, *args, error_type=FragmentOptionError, **kwargs):
        super().__init__(*args, add_help=False, allow_abbrev=False, **kwargs)
        self._error_type = error_type

    def error(self, message: str):
        usage = self.format_usage().strip().removeprefix("usage: ")
        raise self._error_type(f"{self.prog}: {message}. Usage: {usage}")


def _fragment_parser() -> _Parser:
    p = _Parser(prog="%%fragment")
    p.add_argument("name", help="the fragment this cell belongs to (actor, env, learner, …)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--init", action="store_const", const="init", dest="rate",
                      help="run once per replica when deployed")
    when.add_argument("--every", choices=("step", "iteration"), dest="rate",
                      help="run every step (default) or every iteration (default for learner)")
    p.add_argument("--replicas", type=int, help="how many replicas (a policy may override)")
    p.add_argument("--device", choices=("cpu", "gpu"), help="where it wants to run")
    p.add_argument("--reads", nargs="+", default=[], metavar="NAME",
                   help="names the cell reads that the analysis cannot see")
    p.add_argument("--writes", nargs="+", default=[], metavar="NAME",
                   help="names the cell writes that the analysis cannot see")
    return p


def _run_parser() -> _Parser:
    p = _Parser(prog="%fdg run", error_type=RunConfigError)
    p.add_argument("--iterations", type=int, help="training iterations (default 100)")
    p.add_argument("--steps", type=int, help="environment steps per iteration, T (default 128)")
    p.add_argument("--policy", help="inline | coarse | fine | multilearner | gpuonly | async | auto "
                                    "| FILE.json (a saved wb.Policy)")
    p.add_argument("--cluster", help="a Dask scheduler address, tcp://HOST:PORT or tls://HOST:PORT "
                                     "(TLS certificates from Dask's config, distributed.comm.tls.*; "
                                     "see docs/security.md); default: the notebook's client, else "
                                     "an embedded local cluster")
    p.add_argument("--target-return", type=float, dest="target_return",
                   help="stop once the mean of the last 20 episode returns reaches this")
    add_checkpoint_options(p)
    return p


def add_checkpoint_options(parser) -> None:
    """``--checkpoint-dir``, ``--checkpoint-every`` and ``--resume``: shared by ``%fdg run``
    and ``workbench run``."""
    parser.add_argument("--checkpoint-dir", dest="checkpoint_dir", metavar="DIR",
                        help="write checkpoints to DIR (every --checkpoint-every iterations, and at the end)")
    parser.add_argument("--checkpoint-every", type=int, dest="checkpoint_every", metavar="N",
                        help="iterations between checkpoints (needs --checkpoint-dir)")
    parser.add_argument("--resume", metavar="DIR",
                        help="continue from the newest checkpoint in DIR, under any policy and workers")


def _place_parser() -> _Parser:
    p = _Parser(prog="%fdg place", error_type=RunConfigError)
    p.add_argument("--cluster", help="a Dask scheduler address; default: the notebook's "
                                     "client, else an embedded local cluster")
    p.add_argument("--steps", type=int, help="steps per iteration the traffic is shown for "
                                             "(default: the last run's, else 128)")
    return p


FRAGMENT_USAGE = _fragment_parser().format_help()
RUN_USAGE = _run_parser().format_help()
PLACE_USAGE = _place_parser().format_help()


def _split(line: str, error_type) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise error_type(f"cannot read the options {line!r}: {exc}.") from None


def parse_fragment_line(line: str) -> dict:
    """Parse ``NAME [--init | --every step|iteration] [--replicas N] [--device cpu|gpu]
    [--reads …] [--writes …]``."""
    args = _fragment_parser().parse_args(_split(line, FragmentOptionError))
    if args.replicas is not None and args.replicas < 1:
        raise FragmentOptionError(
            f"fragment {args.name!r}: --replicas must be ≥ 1, got {args.replicas}.", fragment=args.name)
    return vars(args)


def parse_run_line(line: str) -> dict:
    """Parse ``run [--iterations N] [--steps T] [--policy P] [--cluster ADDRESS]
    [--target-return R] [--checkpoint-dir DIR] [--checkpoint-every N] [--resume DIR]``; the
    leading ``run`` word is optional."""
    words = _split(line, RunConfigError)
    if words and words[0] == "run":
        words = words[1:]
    return {k: v for k, v in vars(_run_parser().parse_args(words)).items() if v is not None}


def parse_place_line(line: str) -> dict:
    """Parse ``place [--cluster ADDRESS] [--steps T]``; the leading ``place`` is optional."""
    words = _split(line, RunConfigError)
    if words and words[0] == "place":
        words = words[1:]
    options = {k: v for k, v in vars(_place_parser().parse_args(words)).items() if v is not None}
    if "steps" in options and options["steps"] < 1:
        raise RunConfigError(f"--steps must be a whole number ≥ 1, got {options['steps']}.")
    return options
