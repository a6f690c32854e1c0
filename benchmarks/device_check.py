"""The accelerator host's check, in one command: GPU tests, the raw CuPy kernel, GPU PPO end
to end, and the Coarse/Fine scaling sweep, printed as one table.

Run it whenever a GPU host is lent (the issue-27 goals are read off its table). Each part runs
in its own process with its own time limit, so one that crashes or hangs shows as a failed row
and the others still run.

On a host with no route to a package registry, carry the dependencies as wheels built here for
the host's Python (the host already has torch, CuPy and NumPy)::

    python -m benchmarks device_check --download-wheels .whl --python-version 3.12   # here
    python -m benchmarks device_check --wheels .whl                                  # there

``--wheels DIR`` installs every wheel in ``DIR`` (no index, no dependency resolution) into a
private folder and puts it on the path of every part; nothing is installed into the host's
Python. Without ``--wheels`` the parts use the current environment (``pip install -e
".[gpu,test]"`` on a host with a registry).

    python -m benchmarks device_check                       # every part
    python -m benchmarks device_check --parts kernel ppo    # some parts
    python -m benchmarks device_check --json out.json       # the rows as JSON too
    python -m benchmarks device_check --parts ppo --profile --logs out/   # where GPU PPO's time goes
    python -m benchmarks device_check --parts tests --tests-k "nccl or placement"   # some tests again

Parts: ``facts`` (GPU, versions, cores), ``tests`` (``pytest -m gpu``), ``kernel`` (CartPole
env-steps/s, CuPy against NumPy, by number of envs), ``ppo`` (the quickstart's PPO on the
GPU: env-steps/s and wall seconds to solve per seed), ``mappo`` (simple_spread on the GPU,
the env alone and MAPPO under GPUOnly: `device_check_mappo.py`), ``scaling``
(``bench_policies.py --scaling``: Coarse and Fine from 1 to 32 workers beside bare processes),
``llm`` (GRPO's side of ``bench_llm_rl.py``, its JSON in ``--logs``), ``llm_first`` (where
GRPO's first iteration goes) and, asked for by name, ``llm_trl`` (TRL's side, with TRL's
wheels: ``llm_wheels.py --trl``; then ``bench_llm_rl.py --merge`` here) or ``llm_both`` (both
sides in one process, where the image's pyarrow allows: ``llm_wheels.py --both``):
``device_check_llm.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.device_check_llm import part_llm, part_llm_both, part_llm_first, part_llm_trl  # noqa: F401
from benchmarks.device_check_select import gpu_aware_test_files, gpu_test_files, package_versions
from benchmarks.device_wheels import download_wheels, install_wheels
from benchmarks import harness
from benchmarks.harness import ROOT, cell, env_step_rate, steady_rate, streamed, training_seconds, write_json

#: where each part's whole output goes (--logs)
LOGS: str | None = None
#: the line a part's process prints its rows on
ROWS = "ROWS "
PARTS = ("facts", "tests", "kernel", "ppo", "mappo", "scaling", "llm", "llm_trl", "llm_both", "llm_first")


# ----------------------------------------------------------------------------- the parts
def part_facts() -> list[dict]:
    import torch

    rows = [
        {"part": "facts", "what": "cores", "value": os.cpu_count()},
        {"part": "facts", "what": "python", "value": sys.version.split()[0]},
        # gVisor reports 4.4.0: a sandbox whose syscalls (socket writes) cost more
        {"part": "facts", "what": "kernel", "value": platform.release()},
        {"part": "facts", "what": "torch", "value": torch.__version__},
    ]
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        rows.append(
            {
                "part": "facts",
                "what": "gpu",
                "value": f"{torch.cuda.device_count()} × {props.name}, {props.total_memory / 2**30:.0f} GiB",
            }
        )
    else:
        rows.append({"part": "facts", "what": "gpu", "value": "none usable by torch"})
    try:
        import cupy

        rows.append({"part": "facts", "what": "cupy", "value": cupy.__version__})
    except Exception as exc:  # noqa: BLE001
        rows.append({"part": "facts", "what": "cupy", "value": f"not importable: {exc}"})
    rows.append({"part": "facts", "what": "packages", "value": package_versions()})
    return rows


def part_tests(k: str | None = None) -> list[dict]:
    """``pytest -m gpu``, then the CPU tests that look for a GPU (their twins, the detection,
    the placement: on this host they must skip or pass, not assume there is none):
    passed / failed / skipped, and what failed. ``k``: a pytest ``-k`` expression both runs
    keep to (``--tests-k``: rerun the tests that failed, by name); they still collect every
    file, so the summaries count the others as deselected."""
    rows = []
    selected = ["-k", k] if k else []
    for marker, files, what in (
        ("gpu", gpu_test_files(), "pytest -m gpu"),
        ("not gpu", gpu_aware_test_files(), "pytest -m 'not gpu' (tests that look for a GPU)"),
    ):
        # -v, streamed: a part cut at its time limit still says which tests passed, failed or ran
        # and each failure's traceback at once (device_check_instafail): a cut part has no summary
        _, lines = streamed(
            [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                marker,
                "-v",
                "-rfEs",
                "-p",
                "no:cacheprovider",
                "-p",
                "benchmarks.device_check_instafail",
                "--tb=short",
                "--durations=15",
                "-o",
                "addopts=",
                *selected,
                *files,
            ]
        )
        lines = [line for line in lines if line.strip()]
        summary = lines[-1] if lines else "no output"
        rows.append({"part": "tests", "what": what, "value": summary.strip("= ")})
        rows += [
            {"part": "tests", "what": "failed", "value": line[:200]}
            for line in lines
            if line.startswith(("FAILED", "ERROR"))
        ]
    return rows


def part_kernel(sizes=(1024, 65536, 1 << 20)) -> list[dict]:
    """CartPole env-steps/s by number of envs: the CuPy env on the GPU, the NumPy env here."""
    import numpy as np

    from workbench.envs import CartPole

    rows = []
    for n in sizes:
        steps = max(20, min(500, 2_000_000 // n))
        row = {"part": "kernel", "what": f"CartPole × {n:,}"}
        env = CartPole(n, seed=0)
        env.reset()
        row["numpy env-steps/s"] = env_step_rate(env, np.zeros(n, np.int64), max(10, steps // 4))
        try:
            import cupy

            from workbench.envs import FusedCartPole

            sync = cupy.cuda.get_current_stream().synchronize
            env = CartPole(n, seed=0, xp=cupy)
            env.reset()
            row["cupy CartPole env-steps/s"] = env_step_rate(env, cupy.zeros(n, cupy.int64), steps, sync)
            env = FusedCartPole(n, seed=0, xp=cupy)
            env.reset()
            row["fused kernel env-steps/s"] = env_step_rate(env, cupy.zeros(n, cupy.int64), steps * 4, sync)
            row["fused / numpy"] = row["fused kernel env-steps/s"] / row["numpy env-steps/s"]
        except Exception as exc:  # noqa: BLE001
            row["cupy"] = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        rows.append(row)
    return rows


def _ppo_run(
    client,
    num_envs: int,
    seed: int,
    env_on_gpu: bool,
    policy: str,
    graphs: bool = True,
    profile_to: str | None = None,
    num_steps: int | None = None,
):
    """The quickstart's PPO cells; ``env_on_gpu`` False keeps the env on the host, ``graphs``
    False runs the actor and the update without CUDA graphs, ``num_steps`` sets T (None: the
    batch rule's). ``profile_to`` (a path) instead
    runs `PROFILED` iterations with no target, the replica's thread under cProfile from the
    fourth iteration on (the runtime's work between cells included), and saves the stats there."""
    import workbench as wb
    from workbench.algorithms import ppo

    cfg = ppo.PPOConfig(num_envs=num_envs, seed=seed, cuda_graphs=graphs, num_steps=num_steps)
    eager = type("ActorCritic", (ppo.ActorCritic,), {"cuda_graphs": False})
    fdg = wb.FDG(namespace={**vars(ppo), "cfg": cfg, **({} if graphs else {"ActorCritic": eager})})
    for line, body in ppo.FRAGMENT_CELLS:
        if not env_on_gpu:
            body = body.replace("device=replica.device)", 'device="cpu")')
        if profile_to and line == "%%fragment learner --init":
            body = "import cProfile as _cprofile\n_profile = _cprofile.Profile()\n" + body
        if profile_to and line == "%%fragment learner":  # one thread runs every cell under GPUOnly
            body += (
                f"if update == 3:\n    _profile.enable()\n"
                f"if update == {PROFILED}:\n    _profile.disable()\n    _profile.dump_stats({profile_to!r})\n"
            )
        fdg.add_cell(line, body)
    if profile_to:
        return fdg.run(iterations=PROFILED, steps=cfg.num_steps, policy=policy, cluster=client, progress=False)
    return fdg.run(
        iterations=cfg.iterations,
        steps=cfg.num_steps,
        policy=policy,
        cluster=client,
        target_return=cfg.target_return,
        progress=False,
    )


#: iterations of the profiled run (``--profile``)
PROFILED = 40


def _outside_cells_ms(run, skip: int = 3) -> float:
    """Median ms per iteration spent outside the cells (binding, the copies handed between
    fragments, stacking, reading device metrics), after the first ``skip`` iterations."""
    import statistics

    rows = run.rows[skip:] or run.rows
    return (
        statistics.median(
            sum(v for k, v in r.items() if k.startswith("time/") and k.endswith(" other_s")) for r in rows
        )
        * 1e3
    )


def _profile_text(client, num_envs: int) -> str:
    """The profiled run's top functions (own time, then cumulative), as pstats prints them."""
    import io
    import pstats

    path = Path(tempfile.mkdtemp(prefix="workbench-profile-"), "replica.pstats")
    _ppo_run(client, num_envs, 1, True, "gpuonly", profile_to=str(path))
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    return out.getvalue()


def part_ppo(seeds=(1, 2, 3, 4, 5), env_counts=(32, 4096, 16384, 65536), profile: bool = False, steps=()) -> list[dict]:
    """The quickstart's PPO under GPUOnly, by number of envs: the env on the GPU (the
    fused kernel) and, for the smallest count, on the host; env-steps/s (steady, iterations'
    own time), training seconds to solve (iterations only), whole-run seconds to solve, the
    first three iterations' seconds (warm-up and CUDA-graph captures) and the ms per
    iteration outside the cells. ``profile``: then one profiled run at the middle count,
    its stats printed (into the part's log). ``steps``: rollout lengths T to try beside the
    batch rule's at every count of 4,096 envs or more (one more row each)."""
    import logging
    import statistics

    from distributed import Client, LocalCluster

    rows = []
    inf = float("inf")
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        _ppo_run(client, 32, 0, True, "gpuonly")  # warm: imports, CUDA context, kernels
        middle = sorted(env_counts)[len(env_counts) // 2]
        for env_on_gpu, n, graphs, t in [
            (False, min(env_counts), True, None),
            (True, middle, False, None),
            *((True, n, True, None) for n in env_counts),
            *((True, n, True, t) for n in env_counts if n >= 4096 for t in steps),
        ]:
            row = {
                "part": "ppo",
                "what": f"gpuonly, env on {'GPU' if env_on_gpu else 'host'}, {n} envs"
                f"{'' if graphs else ', no CUDA graphs'}{f', T = {t}' if t else ''}",
            }
            rates, train_s, total_s, steps, split, first3, outside = [], [], [], [], [], [], []
            try:
                for seed in seeds:
                    run = _ppo_run(client, n, seed, env_on_gpu, "gpuonly", graphs, num_steps=t)
                    rates.append(steady_rate(run))
                    first3.append(training_seconds(run, 3))
                    outside.append(_outside_cells_ms(run))
                    split.append(
                        {
                            k[5:-10]: v
                            for k, v in run.rows[-1].items()
                            if k.startswith("time/") and k.endswith("_compute_s") and " " not in k
                        }
                    )
                    solved = run.solved_at
                    train_s.append(training_seconds(run, solved["iteration"]) if solved else inf)
                    total_s.append(solved["time_s"] if solved else inf)
                    steps.append(solved["env_steps"] if solved else inf)
                row.update(
                    {
                        "env-steps/s (median)": statistics.median(rates),
                        "training s to solve (median)": statistics.median(train_s),
                        "training s to solve (worst)": max(train_s),
                        "whole run s to solve (median)": statistics.median(total_s),
                        "env steps to solve (median)": statistics.median(steps),
                        "solved": f"{sum(s != inf for s in train_s)}/{len(seeds)}",
                        "first 3 iterations s (median)": statistics.median(first3),
                        "ms per iteration outside cells (median)": statistics.median(outside),
                        "ms per iteration (last, by fragment)": ", ".join(
                            f"{k} {v * 1e3:.1f}" for k, v in split[-1].items()
                        ),
                    }
                )
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        if profile:
            print(
                f"--- profile: GPUOnly, {middle} envs, iterations 4-{PROFILED} ---\n" + _profile_text(client, middle),
                flush=True,
            )
    return rows


def part_mappo(**kwargs) -> list[dict]:
    from benchmarks.device_check_mappo import part_mappo as mappo_rows

    return mappo_rows(**kwargs)


def part_scaling(sizes=(1, 2, 4, 8, 16, 32), pairs: int = 1, policies=("coarse", "fine", "fine-arrival")) -> list[dict]:
    """bench_policies.py's scaling sweep (medians of ``pairs`` pairs of runs) for
    ``policies`` (fine-arrival: Fine with ``act_on_arrival=True``), its table kept as printed."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_policies",
            "--scaling",
            "--pairs",
            str(pairs),
            "--sizes",
            *map(str, sizes),
            "--policies",
            *policies,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    if out.returncode or not table:
        return [
            {
                "part": "scaling",
                "what": "bench_policies --scaling",
                "error": (out.stderr.strip().splitlines() or ["no output"])[-1][:200],
            }
        ]
    return [{"part": "scaling", "what": "table", "value": "\n".join(table)}]


# ----------------------------------------------------------------------------- the driver
def run_part(name: str, env: dict, timeout: float, kwargs: dict) -> list[dict]:
    """One part in its own process; a crash or a timeout is a row that says so."""
    start = time.perf_counter()
    # a session of its own: a part cut at its limit goes with the processes it started
    # (pytest's, a benchmark's cluster), and what it printed so far is kept
    part = subprocess.Popen(
        harness.module_command("benchmarks.device_check", "--one-part", name, "--kwargs", json.dumps(kwargs)),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = part.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(part.pid, signal.SIGKILL)
        stdout, stderr = part.communicate()
        if LOGS:
            Path(LOGS, f"{name}.log").write_text(f"{stdout}\n--- stderr (cut at {timeout:.0f} s) ---\n{stderr}")
        return [{"part": name, "what": "timed out", "value": f"after {timeout:.0f} s{_so_far(stderr)}"}]
    if LOGS:
        Path(LOGS, f"{name}.log").write_text(stdout + "\n--- stderr ---\n" + stderr)
    rows = harness.read_result(stdout, mark=ROWS)
    if rows is None:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return [{"part": name, "what": f"crashed (rc {part.returncode})", "value": tail[:240]}]
    rows.append({"part": name, "what": "wall seconds", "value": round(time.perf_counter() - start, 1)})
    return rows


def _so_far(output: str) -> str:
    """What a cut part's pytest lines say: ``; 12 passed, 1 failed so far`` (or nothing).

    >>> _so_far("tests/a.py::t1 PASSED  [ 50%]\\ntests/a.py::t2 FAILED  [100%]\\n")
    '; 1 passed, 1 failed so far'
    """
    counts = {word: len(re.findall(rf"::\S+ {word.upper()}\b", output)) for word in ("passed", "failed", "skipped")}
    said = ", ".join(f"{n} {word}" for word, n in counts.items() if n)
    return f"; {said} so far" if said else ""


def format_rows(rows: list[dict]) -> str:
    lines = []
    for part in dict.fromkeys(r["part"] for r in rows):
        lines.append(f"\n### {part}")
        for row in (r for r in rows if r["part"] == part):
            extras = {k: v for k, v in row.items() if k not in ("part", "what", "value")}
            if "value" in row and str(row["value"]).startswith("|"):
                lines.append(row["value"])
                continue
            text = cell(row["value"]) if "value" in row else ""
            text += "; ".join(f"{k}: {cell(v)}" for k, v in extras.items())
            lines.append(f"- {row['what']}: {text}")
    return "\n".join(lines)


def main() -> None:
    parser = harness.parser(__doc__, json_output=True)
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=[p for p in PARTS if p not in ("llm_trl", "llm_both")]
    )
    parser.add_argument("--wheels", help="a folder of wheels to install privately first (see above)")
    parser.add_argument("--download-wheels", metavar="DIR", help="download the wheels a GPU host needs, then stop")
    parser.add_argument("--python-version", default="3.12", help="the GPU host's Python (with --download-wheels)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds each part may take")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds all parts may take together (a device call's limit, less the "
        "install): a part is cut at it, later ones are not started",
    )
    parser.add_argument("--logs", help="write each part's whole output to DIR/PART.log")
    parser.add_argument(
        "--tests-k",
        metavar="EXPR",
        help="tests: only the tests pytest's -k EXPR selects, in both runs (rerun some by name)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="ppo: seeds")
    parser.add_argument("--envs", type=int, nargs="+", default=[32, 4096, 16384, 65536], help="ppo: numbers of envs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32], help="scaling: workers")
    parser.add_argument(
        "--scaling-policies",
        nargs="+",
        choices=("coarse", "fine", "fine-arrival"),
        default=["coarse", "fine", "fine-arrival"],
        help="scaling: which policies",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="scaling: pairs of runs per size, medians (1: ~190 s on an H100 host; "
        "3 settles a size within a few points)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[],
        help="ppo: rollout lengths T to try beside the batch rule's at >= 4,096 envs",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="ppo: also profile one run at the middle env count (stats in the part's log)",
    )
    parser.add_argument("--llm-seeds", type=int, nargs="+", default=[1, 2, 3], help="llm, llm_trl: seeds")
    parser.add_argument("--llm-updates", type=int, default=40, help="llm, llm_trl: GRPO updates a seed")
    parser.add_argument(
        "--llm-memory",
        action="store_true",
        help="llm, llm_trl, llm_both: then each side's peak memory (bench_llm_memory.py)",
    )
    parser.add_argument(
        "--llm-policies",
        nargs="+",
        choices=("inline", "coarse", "pipelined", "gpuonly"),
        help="llm, llm_both: workbench's policies (default: bench_llm_rl's)",
    )
    parser.add_argument("--llm-tf32", action="store_true", help="llm, llm_trl, llm_both: bench_llm_rl.py --tf32")
    parser.add_argument(
        "--llm-warm-start-steps",
        type=int,
        default=None,
        help="llm, llm_trl: supervised steps before GRPO (default: bench_llm_rl's)",
    )
    parser.add_argument("--one-part", help=argparse.SUPPRESS)
    parser.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_part:
        rows = globals()[f"part_{args.one_part}"](**json.loads(args.kwargs))
        harness.print_result(rows, mark=ROWS)
        return
    if args.download_wheels:
        download_wheels(args.download_wheels, args.python_version)
        return
    global LOGS
    LOGS = args.logs
    if LOGS:
        Path(LOGS).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    paths = [str(ROOT)]  # benchmarks: the parts' modules and pytest's -p benchmarks.device_check_instafail
    if args.wheels:
        paths.insert(0, install_wheels(args.wheels))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    rows = []
    print(f"workbench device check ({time.strftime('%Y-%m-%d %H:%M')}): {' '.join(args.parts)}", flush=True)
    deadline = time.monotonic() + (args.budget or float("inf"))
    for name in args.parts:  # in the order given: put what matters most first
        kwargs = {
            "tests": {"k": args.tests_k},
            "ppo": {"seeds": args.seeds, "env_counts": args.envs, "profile": args.profile, "steps": args.steps},
            "scaling": {"sizes": args.sizes, "pairs": args.pairs, "policies": args.scaling_policies},
            **{
                llm: {
                    "seeds": args.llm_seeds,
                    "updates": args.llm_updates,
                    "warm_start_steps": args.llm_warm_start_steps,
                    "logs": args.logs,
                    "memory": args.llm_memory,
                    "policies": args.llm_policies,
                    "tf32": args.llm_tf32,
                }
                for llm in ("llm", "llm_trl", "llm_both")
            },
        }.get(name, {})
        left = deadline - time.monotonic()
        if left < 30:  # not worth starting: say so rather than be cut off by the caller
            got = [
                {"part": name, "what": "not run", "value": f"{max(left, 0):.0f} s of --budget {args.budget:g} s left"}
            ]
        else:
            got = run_part(name, env, min(args.timeout, left), kwargs)
        print(format_rows(got), flush=True)
        rows += got
        if args.json:  # after every part: a run cut short still leaves what it measured
            write_json(args.json, rows)
    print("\n## device check\n" + format_rows(rows))


if __name__ == "__main__":
    main()
