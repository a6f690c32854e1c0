"""What a run is asked to do, declared once: :class:`RunConfig`.

Every run option is one field here, with its help text and its check. The ``%fdg run``
line, ``workbench run``'s flags and ``fdg.run(**options)`` are all generated from these
fields, so an option means the same thing — and is refused for the same reason — in a
notebook, on the command line and in a script.

Example:
    >>> config = RunConfig(iterations=60, steps=32, policy="coarse")
    >>> config.iterations, config.cluster
    (60, None)
    >>> parse_run_line("run --iterations 60 --steps 32")
    {'iterations': 60, 'steps': 32}
    >>> RunConfig(iterations=0)
    Traceback (most recent call last):
    ...
    workbench.errors.RunConfigError: --iterations must be a whole number ≥ 1, got 0.

Why a dataclass with argparse generated from it (and not IPython's ``magic_arguments``
or tyro): the same declaration must drive a magic, a console script and a Python call;
``magic_arguments`` serves only the magic, and tyro would be a new dependency for what
thirty lines of field metadata do.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbench.errors import RunConfigError
from workbench.fdg.options import LineParser, split_line

__all__ = [
    "RunConfig",
    "add_run_arguments",
    "options_from",
    "parse_run_line",
    "parse_place_line",
    "RUN_USAGE",
    "PLACE_USAGE",
    "DEFAULT_ITERATIONS",
    "DEFAULT_VIDEO_EVERY",
    "DEFAULT_STEPS",
    "DEFAULT_UNIT",
    "rate_label",
    "ALLREDUCE_BACKENDS",
    "lanes_available",
    "LANES_INSTALL_HINT",
]

DEFAULT_ITERATIONS = 100
DEFAULT_STEPS = 128

#: where an option can be given: the Python API, the ``%fdg run`` line, ``workbench run``
EVERYWHERE = ("api", "magic", "cli")
API_ONLY = ("api",)


#: ``--video-every`` given without N: a clip every this many iterations
DEFAULT_VIDEO_EVERY = 100


def _option(
    default,
    help: str,
    *,
    check: Callable[[str, Any], None] | None = None,
    type: Callable | None = None,
    metavar: str | None = None,
    aliases: tuple[str, ...] = (),
    surfaces: tuple[str, ...] = EVERYWHERE,
    boolean: bool = False,
    const: Any = None,
):
    """A RunConfig field: its default plus how it appears on a command line (``const``: the
    value the flag alone gives, its argument then optional)."""
    return field(
        default=default,
        metadata={
            "help": help,
            "check": check,
            "type": type,
            "metavar": metavar,
            "aliases": aliases,
            "surfaces": surfaces,
            "boolean": boolean,
            "const": const,
        },
    )


# -- checks: one per concept, each raising RunConfigError naming the option -----------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_bool(value) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")  # NumPy's too


def _whole(minimum: int, *, optional: bool = True):
    """Any whole number (``int``, ``np.int64``: a ``numbers.Integral``), not a bool or a
    float; the config keeps it as an ``int``."""

    def check(name: str, value):
        if value is None and optional:
            return None
        if not isinstance(value, numbers.Integral) or _is_bool(value) or value < minimum:
            raise RunConfigError(f"{_flag(name)} must be a whole number ≥ {minimum}, got {value!r}.")
        return int(value)

    return check


def _finite(name: str, value):
    """Any finite real number (``float``, ``int``, ``np.float32``), not a bool; kept as a
    ``float`` (an ``int`` stays one)."""
    if value is None:
        return None
    if _is_bool(value) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise RunConfigError(f"{_flag(name)} must be a finite number, got {value!r}.")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _lost_after(name: str, value):
    value = _finite(name, value)
    if value < 2:
        raise RunConfigError(
            f"{_flag(name)} must be at least 2 seconds (workers heartbeat every half second, "
            f"and a busy one may miss a few), got {value!r}."
        )
    return float(value)


#: what one env step is called unless a run says otherwise (``--unit``)
DEFAULT_UNIT = "env steps"


def rate_label(unit: str) -> str:
    """What a rate of ``unit`` is called: the words joined by dashes, per second.

    >>> rate_label("env steps"), rate_label("completions")
    ('env-steps/s', 'completions/s')
    """
    return "-".join(unit.split()) + "/s"


def _unit(name: str, value) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 40 or not value.isprintable():
        raise RunConfigError(
            f"{_flag(name)} names what one env step is (e.g. completions, samples): "
            f"a word or two of at most 40 printable characters, got {value!r}."
        )


def _boolean(name: str, value) -> None:
    if not isinstance(value, bool):
        raise RunConfigError(f"{name} must be True or False, got {value!r}.")


LANES_INSTALL_HINT = "pip install greenlet (or workbench-rl[envpool])"


def lanes_available() -> bool:
    """Whether ``greenlet`` (what lanes run on, `workbench.runtime.replicas.lanes`) is installed."""
    try:
        import greenlet  # noqa: F401
    except ImportError:
        return False
    return True


def _lanes(name: str, value) -> None:
    _boolean(name, value)
    if value and not lanes_available():
        raise RunConfigError(
            f"{_flag(name)} runs replicas as greenlets, and greenlet is not installed: {LANES_INSTALL_HINT}."
        )


def _policy(name: str, value) -> None:
    from workbench.fdg.policy import Policy

    if isinstance(value, (str, os.PathLike, Policy)) or hasattr(value, "place"):
        return
    raise RunConfigError(
        f"--policy must be a preset name (inline, coarse, fine, multilearner, gpuonly, async, "
        f"pipelined, auto), a FILE.json, a preset object or a wb.Policy; got {type(value).__name__} {value!r}."
    )


#: the values of ``allreduce``: how a group's replicas reduce (`workbench.runtime.transport.process_group`)
ALLREDUCE_BACKENDS = ("auto", "channels", "torch")


def _allreduce(name: str, value) -> None:
    if value not in ALLREDUCE_BACKENDS:
        raise RunConfigError(
            f"{_flag(name)} must be one of {', '.join(ALLREDUCE_BACKENDS)}, got {value!r} (torch uses "
            "NCCL for CUDA tensors and gloo for CPU ones)."
        )


def _cluster(name: str, value) -> None:
    if value is None or hasattr(value, "scheduler_info"):  # a distributed.Client
        return
    if isinstance(value, str) and ":" in value:  # tcp://HOST:PORT, tls://…, HOST:PORT
        return
    raise RunConfigError(
        f"--cluster must be a Dask scheduler address (tcp://HOST:PORT or tls://HOST:PORT) or a "
        f"distributed.Client; got {value!r}."
    )


def _directory(name: str, value) -> None:
    """A directory the run will write to: not a file, and creatable/writable."""
    if value is None:
        return
    if not isinstance(value, (str, os.PathLike)):
        raise RunConfigError(f"{_flag(name)} must be a directory path, got {type(value).__name__} {value!r}.")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise RunConfigError(
            f"{_flag(name)} {str(path)!r} is a file, not a directory. Give a directory (it is created if missing)."
        )
    existing = path
    while not existing.exists():
        existing = existing.parent
    # tried, not asked (os.access): root "may write" to /proc, and a read-only mount says
    # so only when written; a run that trained to its end must not fail on its checkpoint
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".workbench-probe-").cleanup()
    except OSError as exc:
        raise RunConfigError(
            f"{_flag(name)} {str(path)!r}: cannot create a directory in {str(existing)!r} "
            f"({exc.strerror or exc}). Choose a directory you can write to."
        ) from None


def _run_store(name: str, value) -> None:
    """A run store's directory, or None (the default store), or False / "off" (none)."""
    if value is None or value is False or (isinstance(value, str) and value.lower() in ("off", "none")):
        return
    if value is True:
        raise RunConfigError(
            f"{_flag(name)} takes a directory, or off (keep no record); leave it out for the "
            "default store ($WORKBENCH_RUN_STORE, else ./workbench-runs)."
        )
    _directory(name, value)


def _loggers(name: str, value) -> None:
    for logger in value:
        if not (callable(getattr(logger, "log", None)) and callable(getattr(logger, "close", None))):
            raise RunConfigError(
                f"loggers: {logger!r} has no log(row) and close() methods; see "
                "workbench.profiling.CSVLogger for one that does."
            )


def _progress(name: str, value) -> None:
    if not (isinstance(value, bool) or callable(value)):
        raise RunConfigError(f"progress must be True, False or a factory (total, label) -> view; got {value!r}.")


@dataclass(frozen=True)
class RunConfig:
    """Everything a training run is asked to do. Frozen: a run's config never changes.

    Build it from keywords (``fdg.run(**options)`` does), or let ``%fdg run`` and
    ``workbench run`` build it from their flags — the same names with dashes.

    Example:
        >>> RunConfig(iterations=3, checkpoint_every=2)
        Traceback (most recent call last):
        ...
        workbench.errors.RunConfigError: --checkpoint-every needs --checkpoint-dir: the directory to write checkpoints to.
    """

    # what to run
    iterations: int = _option(
        DEFAULT_ITERATIONS,
        "training iterations (with a resume: this many more, numbered on from the checkpoint's)",
        check=_whole(1, optional=False),
        type=int,
        metavar="N",
    )
    steps: int = _option(
        DEFAULT_STEPS, "environment steps per iteration, T", check=_whole(1, optional=False), type=int, metavar="T"
    )
    # where
    policy: Any = _option(
        "inline",
        "inline | coarse | fine | multilearner | gpuonly | async | pipelined | auto | "
        "FILE.json (a saved wb.Policy); coarse when --cluster is given without one",
        check=_policy,
        metavar="P",
    )
    auto_lag: int = _option(
        0,
        "let --policy auto also try Pipelined, its acting replicas this many "
        "updates behind the learner (batches as many updates off-policy, which "
        "PPO's and GRPO's clipped ratio corrects for); 0 keeps auto to the "
        "synchronous presets, which never change what is learned",
        check=_whole(0, optional=False),
        type=int,
        metavar="N",
    )
    cluster: Any = _option(
        None,
        "a Dask scheduler address, tcp://HOST:PORT or tls://HOST:PORT (TLS "
        "certificates from Dask's config, distributed.comm.tls.*, or workbench "
        "run's --tls-* flags; see docs/security.md); default: the notebook's "
        "client, else an embedded local cluster",
        check=_cluster,
        metavar="ADDRESS",
        aliases=("--scheduler",),
    )
    # when to stop
    target_return: float | None = _option(
        None,
        "stop once the run is solved: the mean return of the last finished episodes reaches this",
        check=_finite,
        type=float,
        metavar="R",
    )
    # state and reliability
    resume: Any = _option(
        None, "continue from the newest checkpoint in DIR, under any policy and workers", metavar="DIR"
    )
    checkpoint_dir: str | None = _option(
        None,
        "write checkpoints to DIR (every --checkpoint-every iterations, else every 5-10 s of training; and at the end)",
        check=_directory,
        metavar="DIR",
    )
    checkpoint_every: int | None = _option(
        None, "iterations between checkpoints (needs --checkpoint-dir)", check=_whole(1), type=int, metavar="N"
    )
    snapshot_every: int | None = _option(
        None,
        "iterations between the learners' snapshots to this "
        "process, which a lost worker's run continues from "
        "(default: every iteration on a cluster, paced to a twentieth of the "
        "time for snapshots of 16 MB and more; 0 = off)",
        check=_whole(0),
        type=int,
        metavar="N",
    )
    lost_after: float = _option(
        10.0,
        "seconds within which a worker that stops answering (frozen, or its host "
        "cut off) is called lost and its fragments re-placed; a busy worker whose "
        "process computes is never called lost (docs/faults.md)",
        check=_lost_after,
        type=float,
        metavar="SECONDS",
    )
    allreduce: str = _option(
        "auto",
        "how wb.allreduce averages across learner replicas: auto "
        "(torch.distributed with NCCL when every learner's tensors are on a GPU of "
        "its own, else the channels) | channels (workbench's own) | torch "
        "(torch.distributed: NCCL for CUDA tensors, gloo for CPU ones); the same "
        "numbers either way (docs/clusters.md)",
        check=_allreduce,
        metavar="HOW",
    )
    own_random: bool = _option(
        True,
        "each replica draws from its own random streams (torch, "
        "np.random, random): which replicas share a process never changes "
        "the results; off, replicas of one process overlap their cells "
        "(faster where several replicas share a worker and their envs wait) "
        "and their draws differ from run to run",
        check=_boolean,
        boolean=True,
    )
    lanes: bool = _option(
        False,
        "step the replicas of an acting group that share a process as "
        "lanes of one thread: while one replica's envs step in their own threads "
        "(EnvPool), another acts; the same numbers, faster than threads, and than "
        "one replica of all the envs where each steps many (needs greenlet; "
        "docs/envpool.md)",
        check=_lanes,
        boolean=True,
    )
    act_on_arrival: bool = _option(
        False,
        "under a fine-grained policy, run the actor's step cells on "
        "each env replica's values as they arrive instead of waiting for "
        "all of them every step: a slow env replica no longer holds the "
        "others back; the actor's batches, and so its draws, follow the "
        "arrival order (workbench.runtime.replicas.on_arrival)",
        check=_boolean,
        boolean=True,
    )
    keep_state: bool = _option(
        True, "keep the final fragment states in run.state (to checkpoint or resume from)", check=_boolean, boolean=True
    )
    video_every: int | None = _option(
        None,
        f"record a clip of the agent every N iterations (N alone: every {DEFAULT_VIDEO_EVERY}), played "
        "from the run's state in a low-priority process, into the notebook's live view, run.clips and "
        "TensorBoard; a clip due while the last is still being made is skipped (docs/evaluation.md)",
        check=_whole(1),
        type=int,
        metavar="N",
        const=DEFAULT_VIDEO_EVERY,
    )
    # output
    log_dir: str | None = _option(
        None, "write metrics.csv (and TensorBoard events, when installed) to DIR", check=_directory, metavar="DIR"
    )
    run_store: Any = _option(
        None,
        "keep the run's record (config, metrics, events, summary, final checkpoint) "
        "in a folder of the run store DIR, listed by wb.runs(); default: $WORKBENCH_RUN_STORE, "
        "else ./workbench-runs; off: keep none (docs/runs.md)",
        check=_run_store,
        metavar="DIR",
    )
    run_name: str | None = _option(
        None,
        "the run's name in the run store (default: the notebook's or script's "
        "file name; workbench run: the notebook's)",
        metavar="NAME",
    )
    unit: str = _option(
        DEFAULT_UNIT,
        "what one env step is called in the progress bar, the summary, the "
        "live view and the dashboard page (a language model's GRPO: completions)",
        check=_unit,
        metavar="NAME",
    )
    progress: Any = _option(
        True, "show progress (a live view in notebooks, a bar elsewhere)", check=_progress, boolean=True
    )
    loggers: tuple = _option(
        (), "objects with log(row) and close() fed each finished iteration", check=_loggers, surfaces=API_ONLY
    )

    def __post_init__(self) -> None:
        if isinstance(self.loggers, list):
            object.__setattr__(self, "loggers", tuple(self.loggers))
        for f in dataclasses.fields(self):
            check = f.metadata["check"]
            if check is not None:
                value = check(f.name, getattr(self, f.name))
                if value is not None:  # a number, as the type it stands for (np.int64 → int)
                    object.__setattr__(self, f.name, value)
        if self.auto_lag and self.policy != "auto":
            raise RunConfigError(
                f"--auto-lag {self.auto_lag} widens what --policy auto tries, and this run's "
                f"policy is {self.policy!r}: use --policy auto, or --policy pipelined "
                "for Pipelined itself."
            )
        if self.checkpoint_every is not None and self.checkpoint_dir is None:
            raise RunConfigError("--checkpoint-every needs --checkpoint-dir: the directory to write checkpoints to.")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "RunConfig":
        """A config from keyword options, refusing unknown ones by name."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            import difflib

            hints = [difflib.get_close_matches(u, known, n=1) for u in unknown]
            said = ", ".join(f"{u!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for u, h in zip(unknown, hints))
            raise RunConfigError(
                f"unknown run option{'s' if len(unknown) > 1 else ''} {said}. Options: {', '.join(sorted(known))}."
            )
        options = dict(options)
        if options.get("cluster") is not None and "policy" not in options:
            # a user who names a cluster means "run there": never silently train inline
            options["policy"] = "coarse"
        return cls(**options)

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def run_options(surface: str) -> list[dataclasses.Field]:
    """The RunConfig fields that ``surface`` (``api``, ``magic`` or ``cli``) offers."""
    return [f for f in dataclasses.fields(RunConfig) if surface in f.metadata["surfaces"]]


def add_run_arguments(parser: argparse.ArgumentParser, surface: str, *, only: tuple[str, ...] = ()) -> None:
    """Add every run option ``surface`` offers (or just those named in ``only``) to
    ``parser``; defaults stay None so that a flag given overrides and a flag not given
    leaves the notebook's own value."""
    for f in run_options(surface):
        if only and f.name not in only:
            continue
        meta = f.metadata
        flags = [_flag(f.name), *meta["aliases"]]
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = f" (default {default})" if default not in (None, (), True, False) else ""
        if meta["boolean"]:
            parser.add_argument(
                *flags,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=meta["help"] + (" (default on)" if default else ""),
            )
        else:
            optional = {"nargs": "?", "const": meta["const"]} if meta.get("const") is not None else {}
            parser.add_argument(
                *flags,
                dest=f.name,
                type=meta["type"],
                metavar=meta["metavar"],
                default=None,
                help=meta["help"] + shown,
                **optional,
            )


def options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The run options a parsed command line gave (those left out are not in the dict)."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def _run_parser() -> LineParser:
    p = LineParser(prog="%fdg run", error_type=RunConfigError)
    add_run_arguments(p, "magic")
    p.add_argument(
        "--background",
        action="store_true",
        default=None,
        help="train in a background thread; the notebook stays usable (%%fdg stop ends it)",
    )
    return p


def _place_parser() -> LineParser:
    p = LineParser(prog="%fdg place", error_type=RunConfigError)
    add_run_arguments(p, "magic", only=("cluster", "steps"))  # the board shows traffic per --steps
    return p


RUN_USAGE = _run_parser().format_help()
PLACE_USAGE = _place_parser().format_help()


def _words(line: str, command: str) -> list[str]:
    words = split_line(line, RunConfigError)
    return words[1:] if words and words[0] == command else words


def parse_run_line(line: str) -> dict:
    """The options of a ``%fdg run`` line (the leading ``run`` word is optional), checked;
    ``background`` is there only when ``--background`` was given."""
    args = _run_parser().parse_args(_words(line, "run"))
    options = options_from(args)
    RunConfig(**options)  # every check, now, with the line's flag names in the message
    if args.background:
        options["background"] = True
    return options


def parse_place_line(line: str) -> dict:
    """Parse ``place [--cluster ADDRESS] [--steps T]``; the leading ``place`` is optional."""
    options = options_from(_place_parser().parse_args(_words(line, "place")))
    _whole(1)("steps", options.get("steps"))
    _cluster("cluster", options.get("cluster"))
    return options
