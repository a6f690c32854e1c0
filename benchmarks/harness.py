"""What every benchmark shares: its command line, clocks and rates, contenders run side by side,
child processes, and output as tables and JSON.

A benchmark is a short module on it::

    from benchmarks import harness

    def main() -> None:
        parser = harness.parser(__doc__, repeats=5)
        args = parser.parse_args()
        runs = harness.interleaved({"inline": lambda: rate("inline"), "coarse": lambda: rate("coarse")},
                                   args.repeats)
        rows = harness.compared(runs, base="inline")
        print(harness.table(rows))
        harness.write_json(args.json, runs)

Run it as ``python -m benchmarks NAME`` or ``python -m benchmarks.NAME`` from a checkout.
This module imports the standard library only: a peer's own venv (RLlib's) imports it too.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

T = TypeVar("T")

#: the checkout the benchmarks run from
ROOT = Path(__file__).resolve().parents[1]
#: the folder ``benchmarks`` was imported from: ROOT, or the folder ``against`` links it from
IMPORTED_FROM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the line a child process prints its JSON result on (:func:`print_result`, :func:`read_result`)
RESULT = "RESULT "


# ============================================================================ the command line
def parser(
    doc: str | None, *, repeats: int | None = None, quick: bool = False, json_output: bool = False
) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` described by a benchmark's docstring (its first paragraph the
    description, the rest the epilog, as written), with the common options: ``--repeats N``
    (when ``repeats`` gives the default), ``--quick`` (the smallest setting, when the
    benchmark has one) and ``--json PATH`` (every measurement, :func:`write_json`)."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    script = Path(sys.argv[0])
    prog = f"python -m benchmarks {script.stem}" if script.parent == Path(__file__).parent else None
    made = argparse.ArgumentParser(
        prog=prog, description=head, epilog=rest.strip() or None, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if repeats is not None:
        made.add_argument(
            "--repeats",
            type=int,
            default=repeats,
            metavar="N",
            help=f"repeats of each measurement, medians over them (default {repeats})",
        )
    if quick:
        made.add_argument("--quick", action="store_true", help="the smallest setting: a smoke run, not a measurement")
    if json_output:
        made.add_argument("--json", metavar="PATH", help="also write every measurement to PATH as JSON")
    return made


def parse_overrides(assignments: Iterable[str], config: type, option: str = "--set") -> dict[str, Any]:
    """``["hidden=128", "norm_obs=false"]`` → ``{"hidden": 128, "norm_obs": False}``, each
    FIELD checked against the dataclass ``config`` and typed as its default is.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Config:
    ...     hidden: int = 64
    ...     norm_obs: bool = True
    ...     backend: str = "numpy"
    >>> parse_overrides(["hidden=1e3", "norm_obs=false", "backend=gymnasium"], Config)
    {'hidden': 1000, 'norm_obs': False, 'backend': 'gymnasium'}
    """
    fields = {f.name: f for f in dataclasses.fields(config) if not f.name.startswith("_")}
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        name, sep, text = (part.strip() for part in assignment.partition("="))
        if not sep or name not in fields:
            raise SystemExit(
                f"{option} {assignment!r}: expected FIELD=VALUE with FIELD one of "
                f"{config.__name__}'s: {', '.join(sorted(fields))}"
            )
        overrides[name] = typed(text, fields[name].default)
    return overrides


def typed(text: str, default: Any) -> Any:
    """``text`` as the type of ``default`` (a bool from 1/true/yes/on, an int from ``1e5``);
    with no typed default, a Python literal or else the text itself."""
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(float(text))
    if isinstance(default, float):
        return float(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


# ============================================================================ clocks and rates
def timed(function: Callable[[], T]) -> tuple[T, float]:
    """``function()``'s result and its wall seconds."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def env_step_rate(env, actions, steps: int, sync: Callable[[], None] = lambda: None, warmup: int = 3) -> float:
    """env-steps/s of ``steps`` calls of ``env.step(actions)`` after ``warmup`` untimed ones;
    ``sync`` waits for a device's queued work (CuPy's stream) before each clock read."""
    for _ in range(warmup):
        env.step(actions)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    sync()
    return env.num_envs * steps / (time.perf_counter() - start)


def iteration_seconds(row: Mapping[str, Any]) -> float:
    """A run's iteration's own time (a row of ``run.rows``): its replicas' compute, wait, send
    and other seconds (with several groups side by side it counts them all)."""
    return sum(v for k, v in row.items() if k.startswith("time/") and " " in k and k.endswith("_s"))


def training_seconds(run, upto: int | None = None) -> float:
    """Seconds of the run's iterations up to iteration ``upto``: the run without deploying and
    starting its replicas."""
    return sum(iteration_seconds(r) for r in run.rows if upto is None or r["iteration"] <= upto)


def steady_rate(run, skip: int = 3) -> float:
    """env-steps/s over a run's iterations after the first ``skip`` (warm-up: imports, kernels,
    CUDA graphs), by their own time; a run too short for that skips one."""
    skip = skip if len(run.rows) > skip + 2 else 1
    steps = run.rows[-1]["env_steps"] - run.rows[skip - 1]["env_steps"]
    seconds = sum(iteration_seconds(r) for r in run.rows[skip:])
    return steps / seconds if seconds else math.nan


def clock_rate(run, skip: int = 1) -> float:
    """env-steps/s by the run's clock from the end of its iteration ``skip`` to its end (deploy,
    the init cells and the first ``skip`` iterations left out; a run too short for that, from
    the end of its first). ``skip=1`` is what CleanRL's ``SPS`` measures."""
    rows = run.rows[skip - 1 :] if len(run.rows) > skip else run.rows
    first, last = rows[0], rows[-1]
    seconds = last["time_s"] - first["time_s"]
    return (last["env_steps"] - first["env_steps"]) / seconds if seconds else math.nan


# ============================================================================ side by side
def rotated(names: list[T], turn: int) -> list[T]:
    """``names`` in the order of repeat ``turn``: each starts a turn in its turn, so a machine
    that drifts over minutes (or a first run that warms a cache) favours none of them."""
    k = turn % len(names) if names else 0
    return names[k:] + names[:k]


def interleaved(
    contenders: Mapping[str, Callable[[], T]], repeats: int, report: Callable[[str, int, T], None] | None = None
) -> dict[str, list[T]]:
    """Each contender measured ``repeats`` times, taken in turns (:func:`rotated`) so machine
    noise hits all alike; ``report(name, turn, result)`` after each measurement."""
    results: dict[str, list[T]] = {name: [] for name in contenders}
    for turn in range(repeats):
        for name in rotated(list(contenders), turn):
            results[name].append(contenders[name]())
            if report is not None:
                report(name, turn, results[name][-1])
    return results


def median(values: Iterable[float]) -> float:
    """The median, NaN for none."""
    values = list(values)
    return statistics.median(values) if values else math.nan


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``median (min–max)`` of the finite values, and how many were not (runs that never got
    there count as ``inf``); ``—`` when none is.

    >>> spread([3.0, 1.0, 2.0, math.inf], "{:.1f}")
    '2.5 (1.0–3.0), 1 unsolved'
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    text = f"{fmt.format(median(values))} ({fmt.format(min(finite))}–{fmt.format(max(finite))})"
    return text if len(finite) == len(values) else text + f", {len(values) - len(finite)} unsolved"


def compared(results: Mapping[str, list[Mapping[str, float]]], base: str, key: str = "sps") -> list[dict]:
    """A row per contender: the median of each measured field and ``ratio``, its median
    ``key`` over ``base``'s."""
    medians = {
        name: {field: median(r[field] for r in rows) for field in rows[0]} for name, rows in results.items() if rows
    }
    reference = medians.get(base, {}).get(key, math.nan)
    return [{"contender": name, **values, "ratio": values[key] / reference} for name, values in medians.items()]


# ============================================================================ child processes
def module_command(module: str, *args: str) -> list[str]:
    """The command that runs a benchmark module (``benchmarks.bench_peers``) in a child."""
    return [sys.executable, "-m", module, *args]


def child_env(**extra: str) -> dict[str, str]:
    """A child's environment: this one, unbuffered, with the folder ``benchmarks`` came from
    first on ``PYTHONPATH`` (a child started in another folder still finds these benchmarks)."""
    path = os.pathsep.join(p for p in (IMPORTED_FROM, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **extra}


def spawn(
    command: list[str], timeout: float, cwd: str | Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[str, float, int]:
    """Run ``command`` to its end (or ``timeout``): its stdout + stderr, wall seconds and return
    code (-9 when cut, the output so far kept)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else child_env(),
        )
        out, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out, rc = out + f"\n[timed out after {timeout:.0f} s]", -9
    return out, time.perf_counter() - started, rc


def print_result(result: Any, mark: str = RESULT) -> None:
    """In a child: its result, one JSON line the parent finds with :func:`read_result`."""
    print(mark + json.dumps(result, default=str), flush=True)


def read_result(output: str, mark: str = RESULT) -> Any | None:
    """The last result line a child printed, or None."""
    for line in reversed(output.splitlines()):
        if line.startswith(mark):
            return json.loads(line[len(mark) :])
    return None


def streamed(command: list[str], cwd: str | Path = ROOT) -> tuple[int, list[str]]:
    """Run ``command``, passing each line of its output on to stderr as it comes (a part cut at
    its time limit keeps what it printed); its return code and lines."""
    child = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env()
    )
    lines = []
    for line in child.stdout:
        print(line, end="", file=sys.stderr, flush=True)
        lines.append(line.rstrip("\n"))
    return child.wait(), lines


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (a GPU-only part skips, saying so, when not)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# ============================================================================ output
def cell(value: Any) -> str:
    """A table cell: floats to three significant digits, or whole above 100."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—" if math.isnan(value) else str(value)
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(rows: list[Mapping[str, Any]], columns: list[str] | None = None) -> str:
    """A Markdown table of ``rows`` (dicts), the columns those of the first row unless given.

    >>> print(table([{"contender": "inline", "sps": 7215.4, "ratio": 1.0}]))
    | contender | sps | ratio |
    |---|---|---|
    | inline | 7,215 | 1 |
    """
    columns = columns or (list(rows[0]) if rows else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str | Path | None, payload: Any) -> None:
    """``payload`` as indented JSON at ``path`` (nothing when no path was asked for)."""
    if path:
        Path(path).write_text(json.dumps(payload, indent=1, default=str))
