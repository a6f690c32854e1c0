"""The option line of ``%%fragment``, parsed without IPython.

The magic, the headless runner (which reads it from a notebook's cells) and
:func:`workbench.algorithms.ppo.build_fdg` share this parser, so a line means the same
thing everywhere. (``%fdg run``'s options are :class:`workbench.config.RunConfig`'s.)

Example:
    >>> parse_fragment_line("actor --replicas 2")
    {'name': 'actor', 'rate': None, 'replicas': 2, 'device': None, 'reads': [], 'writes': []}
"""

from __future__ import annotations

import argparse
import shlex

from workbench.fdg.errors import FragmentOptionError
from workbench.fdg.vocabulary import DEVICE_KINDS

__all__ = ["parse_fragment_line", "FRAGMENT_USAGE", "without_comment"]


class LineParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the process."""

    def __init__(self, *args, error_type=FragmentOptionError, **kwargs):
        super().__init__(*args, add_help=False, allow_abbrev=False, **kwargs)
        self._error_type = error_type

    def error(self, message: str):
        usage = self.format_usage().strip().removeprefix("usage: ")
        raise self._error_type(f"{self.prog}: {message}. Usage: {usage}")


def _fragment_parser() -> LineParser:
    p = LineParser(prog="%%fragment")
    p.add_argument("name", help="the fragment this cell belongs to (actor, env, learner, …)")
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--init", action="store_const", const="init", dest="rate", help="run once per replica when deployed"
    )
    when.add_argument(
        "--every",
        choices=("step", "iteration"),
        dest="rate",
        help="run every step (default) or every iteration (default for learner)",
    )
    p.add_argument("--replicas", type=int, help="how many replicas (a policy may override)")
    p.add_argument("--device", choices=DEVICE_KINDS, help="where it wants to run")
    p.add_argument(
        "--reads", nargs="+", default=[], metavar="NAME", help="names the cell reads that the analysis cannot see"
    )
    p.add_argument(
        "--writes", nargs="+", default=[], metavar="NAME", help="names the cell writes that the analysis cannot see"
    )
    return p


FRAGMENT_USAGE = _fragment_parser().format_help()


def split_line(line: str, error_type) -> list[str]:
    """A magic line's words; a ``# comment`` after them is not one (docs write
    ``%%fragment actor   # every step``, and a copied cell must run as it reads).

        >>> split_line("actor --replicas 2  # two of them", ValueError)
        ['actor', '--replicas', '2']
    """
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        raise error_type(f"cannot read the options {line!r}: {exc}.") from None


def without_comment(line: str) -> str:
    """``line`` up to a ``#`` that starts a comment: at its start or after a space, outside
    quotes (``%fdg   # draw the FDG`` is ``%fdg``).

        >>> without_comment("update cfg  # the new lr"), without_comment("run --log-dir 'a #1'")
        ('update cfg', "run --log-dir 'a #1'")
    """
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def parse_fragment_line(line: str) -> dict:
    """Parse ``NAME [--init | --every step|iteration] [--replicas N] [--device cpu|gpu]
    [--reads …] [--writes …]``."""
    args = _fragment_parser().parse_args(split_line(line, FragmentOptionError))
    if args.replicas is not None and args.replicas < 1:
        raise FragmentOptionError(
            f"fragment {args.name!r}: --replicas must be ≥ 1, got {args.replicas}.", fragment=args.name
        )
    return vars(args)
