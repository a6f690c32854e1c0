"""The benchmarks' harness and the scripts a GPU session runs (benchmarks/device_check.py,
bench_llm_rl.py's merge, llm_wheels.py's pyarrow trim), run here on the CPU so they do not rot
between the sessions that are lent a device: what they print and write, their budget, their
refusals; and a few benchmarks smoke-run at their smallest settings, as ``python -m benchmarks``."""

from __future__ import annotations

import doctest
import importlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: a benchmark's process, started in another folder: it finds ``benchmarks`` in the checkout
BENCHMARK_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def _script(name: str):
    """A benchmark module, imported when a test needs it (bench_llm_rl imports transformers:
    not at collection)."""
    return importlib.import_module(f"benchmarks.{name}")


def _benchmark(name: str, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m benchmarks NAME ARGS`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", name, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=BENCHMARK_ENV,
    )


def _device_check(*args: str, tmp_path: Path, timeout: float = 300) -> tuple[str, list[dict]]:
    out = tmp_path / "check.json"
    done = _benchmark("device_check", *args, "--json", str(out), cwd=tmp_path, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, json.loads(out.read_text())


# ----------------------------------------------------------------------------- the harness
def test_the_harness_examples_hold():
    for name in ("harness", "__main__"):
        assert doctest.testmod(_script(name)).failed == 0, name


def test_interleaved_contenders_each_go_first_in_turn_and_are_compared_on_medians():
    harness = _script("harness")
    order = []
    speeds = {"a": iter([10.0, 30.0, 20.0]), "b": iter([5.0, 5.0, 50.0])}
    results = harness.interleaved(
        {name: (lambda n=name: order.append(n) or {"sps": next(speeds[n])}) for name in ("a", "b")}, repeats=3
    )
    assert order == ["a", "b", "b", "a", "a", "b"]
    rows = harness.compared(results, base="a")
    assert [(r["contender"], r["sps"], r["ratio"]) for r in rows] == [("a", 20.0, 1.0), ("b", 5.0, 0.25)]
    assert harness.table(rows, ["contender", "ratio"]).splitlines()[-1] == "| b | 0.25 |"


def test_the_common_options_and_overrides_checked_against_a_config():
    harness = _script("harness")
    from workbench.algorithms.ppo import PPOConfig

    args = harness.parser("A benchmark.\n\nMore.", repeats=3, quick=True, json_output=True).parse_args(["--quick"])
    assert (args.repeats, args.quick, args.json) == (3, True, None)
    assert harness.parse_overrides(["num_envs=8", "anneal_lr=false"], PPOConfig) == {"num_envs": 8, "anneal_lr": False}
    with pytest.raises(SystemExit, match="--set 'envs=8': expected FIELD=VALUE with FIELD one of PPOConfig's"):
        harness.parse_overrides(["envs=8"], PPOConfig)


def test_python_m_benchmarks_lists_every_benchmark_with_a_line_and_refuses_an_unknown_one(tmp_path):
    listed = _benchmark("--help", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[2:] if line.strip()}
    assert {"bench_peers", "bench_quickstart", "device_check", "soak", "against"} <= set(lines)
    assert "harness" not in lines and "device_check_mappo" not in lines  # modules, not programs
    assert all(len(line.split()) > 2 for line in lines.values()), listed.stdout  # each with its description
    unknown = _benchmark("no_such_benchmark", cwd=tmp_path)
    assert unknown.returncode == 1 and "no benchmark 'no_such_benchmark'" in unknown.stderr


def test_every_benchmark_parses_its_options():
    """Each runnable benchmark imports and answers ``--help`` (one process for them all)."""
    runnable = _script("__main__").runnable()
    check = (
        "import runpy, sys\nfailed = []\nfor name in sys.argv[1:]:\n"
        "    sys.argv = [name, '--help']\n    try:\n"
        "        runpy.run_module('benchmarks.' + name, run_name='__main__')\n"
        "    except SystemExit as exc:\n        failed += [name] if exc.code else []\n"
        "    except Exception as exc:\n        failed.append(f'{name}: {exc!r}')\n"
        "print('FAILED', failed)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, *runnable],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=BENCHMARK_ENV,
    )
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "FAILED []", said


# ----------------------------------------------------------------------------- smoke runs
def test_the_a_b_benchmark_runs_its_variants_in_fresh_processes(tmp_path):
    """bench_ab at its smallest: each variant a child process, the shared hand-over by its
    documented switch (WORKBENCH_HAND_OVER), not a patch."""
    out = tmp_path / "ab.json"
    done = _benchmark(
        "bench_ab",
        "--repeats",
        "1",
        "--iterations",
        "3",
        "--variants",
        "current",
        "shared-hand-over",
        "--json",
        str(out),
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| contender | sps | ratio |" in done.stdout
    medians = {row["contender"]: row for row in json.loads(out.read_text())["medians"]}
    assert set(medians) == {"current", "shared-hand-over"} and medians["current"]["ratio"] == 1.0
    assert medians["shared-hand-over"]["sps"] > 0


def test_the_instrumentation_benchmark_runs_at_its_smallest(tmp_path):
    done = _benchmark("bench_instrumentation", "--repeats", "1", "--iterations", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "median env-steps/s: timing on" in done.stdout


def test_the_env_benchmark_runs_quick(tmp_path):
    done = _benchmark("bench_envs", "--quick", "--repeats", "1", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| N |" in done.stdout


def test_the_device_check_runs_its_parts_here(tmp_path):
    text, rows = _device_check("--parts", "facts", "kernel", tmp_path=tmp_path)
    facts = {r["what"]: r["value"] for r in rows if r["part"] == "facts"}
    assert facts["cores"] >= 1 and facts["python"].startswith("3.")
    assert "pyarrow " in facts["packages"] and "transformers " in facts["packages"]
    kernel = [r for r in rows if r["part"] == "kernel" and r["what"].startswith("CartPole ×")]
    assert len(kernel) == 3 and all(r["numpy env-steps/s"] > 0 for r in kernel)
    assert "## device check" in text and "### kernel" in text


def test_a_budget_too_small_for_a_part_lists_it_as_not_run(tmp_path):
    text, rows = _device_check("--parts", "kernel", "tests", "--budget", "20", tmp_path=tmp_path)
    assert [(r["part"], r["what"]) for r in rows] == [("kernel", "not run"), ("tests", "not run")]
    assert all(r["value"].endswith("s of --budget 20 s left") for r in rows)


@pytest.mark.slow  # a Dask cluster and two short MAPPO runs
def test_its_mappo_part_runs_mappo_under_gpuonly_on_this_cpu(tmp_path):
    done = _benchmark(
        "device_check",
        "--one-part",
        "mappo",
        "--kwargs",
        json.dumps({"env_counts": [8], "iterations": 2}),
        cwd=tmp_path,
        timeout=600,
    )
    rows = json.loads([line for line in done.stdout.splitlines() if line.startswith("ROWS ")][-1][5:])
    (row,) = rows
    assert row["what"] == "simple_spread × 8" and row["env numpy env-steps/s"] > 0
    for where in ("GPU", "host"):  # no GPU here: GPUOnly runs on the worker's CPU
        assert row[f"MAPPO gpuonly, env on {where}, env-steps/s"] > 0, row


@pytest.mark.slow  # a Dask cluster, then TRL
def test_its_llm_parts_write_the_two_sides_that_merge_here(tmp_path):
    pytest.importorskip("trl")
    logs = tmp_path / "logs"
    text, rows = _device_check(
        "--parts",
        "llm",
        "llm_trl",
        "--llm-seeds",
        "1",
        "--llm-updates",
        "2",
        "--llm-warm-start-steps",
        "5",
        "--llm-memory",
        "--logs",
        str(logs),
        tmp_path=tmp_path,
    )
    assert [r["value"].split(";")[0] for r in rows if r["what"] == "bench_llm_rl"] == ["rc 0", "rc 0"], text
    peaks = [r for r in rows if r["what"] == "peak memory" and r["value"].endswith("×")]  # each side's, after its run
    assert [(r["part"], r["value"].split()[0]) for r in peaks] == [("llm", "workbench"), ("llm_trl", "TRL")], text
    bench_llm_rl = _script("bench_llm_rl")
    merged, meta = bench_llm_rl.merge([str(logs / "llm_trl.json"), str(logs / "llm_workbench.json")])
    on_cpu = {"workbench inline", "workbench coarse", "workbench pipelined"}  # a GPU host runs inline, gpuonly
    assert set(merged) == {"TRL GRPOTrainer", *on_cpu} and meta["seeds"] == [1]


@pytest.mark.slow  # a Dask cluster and TRL, one process
def test_its_llm_both_part_runs_the_two_sides_in_one_process(tmp_path):
    pytest.importorskip("trl")
    logs = tmp_path / "logs"
    text, rows = _device_check(
        "--parts",
        "llm_both",
        "--llm-seeds",
        "1",
        "--llm-updates",
        "2",
        "--llm-warm-start-steps",
        "5",
        "--llm-policies",
        "inline",
        "--logs",
        str(logs),
        tmp_path=tmp_path,
    )
    assert [r["value"].split(";")[0] for r in rows if r["what"] == "bench_llm_rl"] == ["rc 0"], text
    both = json.loads((logs / "llm_both.json").read_text())
    # one process ran both sides, workbench's under the policies asked for alone
    assert set(both["rows"]) == {"TRL GRPOTrainer", "workbench inline"}
    assert not [r for r in rows if r["what"] == "peak memory"], "the peak memory measure is --llm-memory's"
    assert "llm_both" in _script("device_check").PARTS and "pyarrow" not in _script("llm_wheels").both_names()


@pytest.mark.slow  # GRPO's pieces and two short inline runs of the small model
def test_its_llm_first_part_splits_grpo_s_first_iteration_on_this_cpu(tmp_path):
    text, rows = _device_check("--parts", "llm_first", tmp_path=tmp_path)
    (row,) = [r for r in rows if r["what"] != "wall seconds"]
    assert row["what"] == "rc 0", text
    shown = row["value"]
    for piece in ("learner init: weights_copy", "reference init: load_weights", "it 1 grpo_update", "inline run"):
        assert piece in shown, shown
    assert "### llm_first" in text


@pytest.mark.slow  # GRPO inline, 6 updates of a small model
def test_workbench_s_held_out_curve_comes_from_weights_saved_every_eval_every_updates_measured_after():
    pytest.importorskip("transformers")
    import dataclasses

    from workbench.algorithms import grpo

    bench_llm_rl = _script("bench_llm_rl")
    cfg = dataclasses.replace(grpo.GRPOConfig(), iterations=3, eval_every=2, max_operand=9, warm_start_steps=60)
    task = bench_llm_rl.make_task(cfg)
    start = bench_llm_rl.warm_model(cfg, task, seed=0)  # accuracies above 0: the comparisons below mean something
    result = bench_llm_rl.run_workbench(cfg, start, task, "inline", None, updates=6)
    times = [seconds for seconds, _ in result["curve"]]
    # saved after updates 2, 3 (TRL's count, though not a multiple of eval_every), 4 and 6
    assert len(times) == 4 and times == sorted(times) and 0 < times[-1] <= result["final_wall_s"], result
    # TRL's update count reads the weights saved after update 3; the last saved are the final model's
    assert (result["accuracy"], result["wall_s"]) == (result["curve"][1][1], times[1])
    assert result["curve"][-1][1] == result["final_accuracy"] and result["updates"] == 6
    assert result["saving_s"] > 0  # the saves' time, measured, is what comes off workbench's times


def test_the_llm_benchmark_refuses_a_save_interval_below_one_update(tmp_path):
    done = _benchmark("bench_llm_rl", "--eval-every", "0", cwd=tmp_path)
    assert done.returncode == 2 and "--eval-every 0: save workbench's weights every 1 or more updates" in done.stderr


def _side(path: Path, rows: dict, **meta) -> str:
    settings = {
        "updates": 2,
        "device": "cpu",
        "size": "small",
        "seeds": [1, 2],
        "warm_start_steps": 30,
        "parameters": 100_000,
        **meta,
    }
    path.write_text(json.dumps({"meta": settings, "rows": rows}))
    return str(path)


def test_merging_the_llm_sides_times_each_workbench_run_against_trl_s_accuracy_on_its_seed(tmp_path, capsys):
    trl = {
        "TRL GRPOTrainer": [
            {"accuracy": 0.5, "wall_s": 10.0, "tokens_per_s": 100.0, "reach_s": 10.0},
            {"accuracy": 0.2, "wall_s": 12.0, "tokens_per_s": 100.0, "reach_s": 12.0},
        ]
    }
    # seed 1 reaches 0.5 at 3 s; seed 2 reaches 0.2 at 1 s (its own TRL's, not seed 1's)
    wb = {
        "workbench gpuonly": [
            {"accuracy": 0.6, "wall_s": 8.0, "tokens_per_s": 300.0, "curve": [[1.0, 0.3], [3.0, 0.5]]},
            {"accuracy": 0.3, "wall_s": 8.0, "tokens_per_s": 300.0, "curve": [[1.0, 0.2]]},
        ]
    }
    bench_llm_rl = _script("bench_llm_rl")
    rows, meta = bench_llm_rl.merge([_side(tmp_path / "t.json", trl), _side(tmp_path / "w.json", wb)])
    bench_llm_rl.print_table(rows, meta)
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("workbench gpuonly")][0]
    assert line.split()[-2:] == ["2.0", "0.18×"]  # median of 3 s and 1 s; ÷ TRL's median wall 11 s


def test_a_side_cut_short_is_compared_on_the_seeds_both_finished_and_a_run_that_unlearned_is_said(tmp_path, capsys):
    trl = {
        "TRL GRPOTrainer": [
            {"accuracy": 0.1, "wall_s": 6.0, "tokens_per_s": 100.0, "reach_s": 6.0, "warm_start_accuracy": 0.2},
            {"accuracy": 0.1, "wall_s": 100.0, "tokens_per_s": 100.0, "reach_s": 100.0, "warm_start_accuracy": 0.2},
        ]
    }
    wb = {
        "workbench gpuonly": [
            {
                "accuracy": 0.1,
                "wall_s": 9.0,
                "tokens_per_s": 300.0,
                "curve": [[2.0, 0.15]],
                "warm_start_accuracy": 0.2,
                "first_iteration_s": 1.5,
                "iteration_s": 0.14,
                "split_s": {"generate": 0.05, "learner": 0.06},
            }
        ]
    }  # seed 2 cut
    bench_llm_rl = _script("bench_llm_rl")
    bench_llm_rl.print_table(*bench_llm_rl.merge([_side(tmp_path / "t.json", trl), _side(tmp_path / "w.json", wb)]))
    out = capsys.readouterr().out
    assert "medians over seeds [1]:" in out  # TRL's median wall is seed 1's 6 s, not 53 s
    assert [x for x in out.splitlines() if x.startswith("workbench gpuonly ")][0].split()[-2:] == ["2.0", "0.33×"]
    assert "then 140 ms an iteration; cells: generate 50 ms, learner 60 ms" in out
    assert "TRL's runs did not raise held-out accuracy over the warm start" in out


def test_merging_sides_that_ran_other_settings_is_refused(tmp_path):
    a = _side(tmp_path / "a.json", {"TRL GRPOTrainer": []})
    b = _side(tmp_path / "b.json", {"workbench gpuonly": []}, updates=40)
    with pytest.raises(SystemExit, match=r"--merge: .*b\.json ran other settings .*'updates': 40"):
        _script("bench_llm_rl").merge([a, b])


def test_the_pyarrow_trim_drops_what_datasets_never_loads_and_its_record_lines(tmp_path):
    wheel = tmp_path / "pyarrow-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    kept = ["pyarrow/__init__.py", "pyarrow/libarrow.so.2600", "pyarrow/lib.cpython-312-x86_64-linux-gnu.so"]
    dropped = [
        "pyarrow/libarrow_flight.so.2600",
        "pyarrow/_s3fs.cpython-312-x86_64-linux-gnu.so",
        "pyarrow/include/arrow/api.h",
        "pyarrow/tests/test_array.py",
    ]
    record = "pyarrow-1.0.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in kept + dropped:
            z.writestr(name, b"x")
        z.writestr(record, "\n".join(f"{n},sha256=abc,1" for n in kept + dropped))
    _script("llm_wheels").trim_pyarrow(wheel)
    with zipfile.ZipFile(wheel) as z:
        assert sorted(z.namelist()) == sorted(kept + [record])
        assert z.read(record).decode().split() == [f"{n},sha256=abc,1" for n in kept]


#: how a conftest or plugin would mark tests it collects, whatever their files say
MARKING_HOOKS = re.compile(r"add_marker|pytest_collection_modifyitems|pytest_itemcollected|pytest_pycollect_makeitem")


def _files_a_gpu_mark_could_reach() -> list[str]:
    """The test files that could hold a gpu-marked test: a test carries the marker only where
    its file names it, or a name made from it (``mark.gpu``, ``pytestmark = …``, ``marks=…``,
    a base class's), or imports such a name from a module of tests/ (tests/gpu's ON_GPU). Such
    names say "gpu" (``GPU_ONLY``, ``needs_gpu``…); one that did not would still come from a
    module of tests/ that says it, whose name the file then says. So: the files that say "gpu"
    in any case, or the name of a module of tests/ that does."""
    says_gpu = re.compile("gpu", re.IGNORECASE)
    modules = [p for p in (REPO / "tests").rglob("*.py") if not p.name.startswith("test_")]
    names = {p.parent.name if p.name == "__init__.py" else p.stem for p in modules if says_gpu.search(p.read_text())}
    names.discard("conftest")  # pytest loads it; nothing imports it
    reaches = re.compile("|".join(["gpu", *(rf"\b{re.escape(n)}\b" for n in names)]), re.IGNORECASE)
    return sorted(
        str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py") if reaches.search(p.read_text())
    )


def test_the_tests_part_runs_every_file_that_holds_gpu_marked_tests():
    """pytest's own view (collecting here, where every extra is installed) against the
    device check's text search: a GPU test left out would never run anywhere. pytest collects
    the files a gpu mark could reach at all (above: a quarter of the suite, which is what
    collecting costs); no conftest or plugin of the repository marks the tests it collects,
    which would reach any file."""
    support = [REPO / "conftest.py", *(p for p in (REPO / "tests").rglob("*.py") if not p.name.startswith("test_"))]
    hooks = [str(p.relative_to(REPO)) for p in support if MARKING_HOOKS.search(p.read_text())]
    assert not hooks, f"{hooks} may mark tests as they are collected: collect the whole tree here"
    reachable = _files_a_gpu_mark_could_reach()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            *reachable,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCHMARKS.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    marked = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert {"tests/gpu/test_grpo_gpu.py", "tests/gpu/test_rlhf_gpu.py"} <= marked  # ON_TORCH_GPU's
    assert marked <= set(_script("device_check_select").gpu_test_files())


def test_wheels_for_a_gpu_host_leave_out_what_its_image_brings_with_torch():
    device_wheels = _script("device_wheels")
    assert device_wheels._closure(["torch"]) == {"torch"}  # not its cuda-toolkit, cuda-bindings…
    names = device_wheels.carried(device_wheels._closure(["transformers", "dask"]))
    assert "dask" in names and "transformers" in names
    assert not [n for n in names if n.startswith(device_wheels.IMAGE_PREFIXES) or n in device_wheels.HOST_HAS]


def test_the_scaling_part_splits_the_actor_s_iteration_into_cells_sends_waits_and_the_rest():
    """Fine's actor answers every env replica each step: the split says where its step goes."""
    import os

    from distributed import Client, LocalCluster

    import workbench as wb

    bench = _script("bench_policies")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        *_, split = bench._measure(client, wb.SingleLearnerFine(envs=2), 6, pids, 2.0)
    assert set(split) == {*bench.SPLIT, bench.SEND_CPU}
    # 6 iterations of 32 steps each waiting 2 ms for the envs: most of the actor's iteration is waiting
    assert split["wait"] > 32 * 2.0 / 2 and split["send"] > 0
    assert 0 < split[bench.SEND_CPU] <= split["send"] * 1.05 + 0.1  # of the sending, the thread's CPU


def test_the_on_arrival_control_answers_each_env_without_waiting_for_the_slowest():
    """The control of Fine acting on arrival answers whichever envs' observations are in.
    Here one env holds back its first timed answer until every other env has taken all its
    steps: an actor that waited for the slowest env (lockstep) could never finish, this one
    must, having sent each env exactly ``steps`` actions."""
    import threading
    from multiprocessing import Pipe

    import numpy as np

    bench = _script("bench_policies")
    steps, fast = 10, 3
    fast_done, left, lock, actions = threading.Event(), [fast], threading.Lock(), {}

    def env(conn, index: int, slow: bool) -> None:
        taken = 0
        while (action := conn.recv()) is not None:
            taken += 1
            assert len(action) == 16  # its own rows only
            if slow and taken == 1 and not fast_done.wait(60):
                break  # the others never finished: the actor waited for this env
            conn.send(np.zeros((16, 4), np.float32))
            if not slow and taken == steps:
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        fast_done.set()
        actions[index] = taken

    pipes = [Pipe() for _ in range(fast + 1)]
    envs = [threading.Thread(target=env, args=(child, i, i == fast), daemon=True) for i, (_, child) in enumerate(pipes)]
    for thread in envs:
        thread.start()
    actor = threading.Thread(
        target=bench._answer_on_arrival,
        daemon=True,
        args=([mine for mine, _ in pipes], [np.zeros((16, 4), np.float32)] * (fast + 1), steps),
    )
    actor.start()
    actor.join(120)
    assert not actor.is_alive() and fast_done.is_set()
    for mine, _ in pipes:
        mine.send(None)
    for thread in envs:
        thread.join(10)
    assert actions == {i: steps for i in range(fast + 1)}


def test_the_tests_part_runs_the_gpu_tests_and_the_cpu_tests_that_look_for_a_gpu(tmp_path):
    """Both of the part's pytest runs, kept by ``--tests-k detection`` to GPU detection's tests:
    the gpu test that finds this host's GPUs and its CPU twins in test_placement_cpu.py, which
    look for one. Each run still collects every one of its files (the others are deselected);
    the CPU tests left out run in the suite itself."""
    logs = tmp_path / "logs"
    _, rows = _device_check(
        "--parts", "tests", "--tests-k", "detection", "--logs", str(logs), tmp_path=tmp_path, timeout=900
    )
    got = {r["what"]: r["value"] for r in rows if r["part"] == "tests"}
    assert not [r for r in rows if r["what"] == "failed"]
    on_gpu, looking = got["pytest -m gpu"], got["pytest -m 'not gpu' (tests that look for a GPU)"]
    assert "skipped" in on_gpu and "passed" not in on_gpu  # no GPU here: every gpu test skips, saying why
    assert " passed" in looking and "failed" not in looking
    assert "deselected" in on_gpu and "deselected" in looking  # -k reached both runs
    log = (logs / "tests.log").read_text()
    assert "needs CUDA" in log, log[-3000:]  # why it skipped
    for ran in (
        "tests/gpu/test_on_gpu.py::test_detection_and_the_inventory_find_this_hosts_gpus SKIPPED",
        "tests/gpu/test_placement_cpu.py::test_detection_rules PASSED",
        "tests/gpu/test_placement_cpu.py::test_detection_on_this_cpu_host_finds_none PASSED",
    ):
        assert ran in log, log[-3000:]
    assert "tests/gpu/test_placement_cpu.py" in _script("device_check_select").gpu_aware_test_files()


def test_bench_llm_rl_s_tf32_switch_reaches_a_worker_as_sent_there():
    """``--tf32`` sets TF32 in the benchmark's process and, through ``client.run``, in the
    workers': the function sent there must pickle by value and set both flags where it runs."""
    pytest.importorskip("transformers")
    import cloudpickle
    import torch

    script = _script("bench_llm_rl")
    cloudpickle.register_pickle_by_value(script)  # as the script's __main__ is pickled
    try:
        sent = cloudpickle.loads(cloudpickle.dumps(script.allow_tf32))
    finally:
        cloudpickle.unregister_pickle_by_value(script)
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        sent()
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("plugin", [True, False], ids=["with-instafail", "without"])
def test_a_tests_part_cut_at_its_limit_still_shows_why_a_test_failed(tmp_path, plugin):
    """The device check's pytest runs with device_check_instafail: a failure's traceback is
    printed when the test fails, so a run killed before its summary still says why (without
    the plugin it does not: the traceback waits for the summary). Here the run's second test
    ends the process, as the part's time limit would."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_cut.py").write_text(
        "import os\n\ndef test_fails():\n    assert 1 == 2, 'the reason it failed'\n\n"
        "def test_the_run_is_cut_here():\n    os._exit(9)\n"
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:cacheprovider",
        "-c",
        str(tmp_path / "pytest.ini"),
        "--rootdir",
        str(tmp_path),
        str(tmp_path / "test_cut.py"),
    ]
    if plugin:
        command[3:3] = ["-p", "benchmarks.device_check_instafail"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**BENCHMARK_ENV, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 9 and "short test summary" not in done.stdout, done.stdout  # no summary came
    assert "test_cut.py::test_fails FAILED" in done.stdout, done.stdout
    assert ("AssertionError: the reason it failed" in done.stdout) == plugin, done.stdout
