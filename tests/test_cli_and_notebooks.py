"""The headless runner and the shipped notebooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


#: `workbench run` in a child process that Ctrl-C reaches: a shell's background job ignores
#: SIGINT, and Python keeps that, so it sets its own handler, as a terminal's foreground one has
def wait_for_rows(proc, csv, rows: int = 3, seconds: float = 180) -> None:
    """Until a `workbench run` child's metrics CSV has ``rows`` rows (or it ended, or time ran out)."""
    import time

    deadline = time.monotonic() + seconds
    while (
        time.monotonic() < deadline
        and proc.poll() is None
        and not (csv.exists() and csv.read_text().count("\n") >= rows)
    ):
        time.sleep(0.1)


CLI_WITH_CTRL_C = (
    "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from workbench.cli import console_main\nsys.exit(console_main(sys.argv[1:]))"
)


def test_quickstart_cells_are_the_library_algorithm_byte_for_byte():
    from tests.conftest import assert_notebook_is_the_module
    from workbench.algorithms import ppo

    notebook_fdg, options = assert_notebook_is_the_module(QUICKSTART, ppo)
    assert options["steps"] == notebook_fdg.namespace["cfg"].num_steps
    assert options["target_return"] == 475.0


def test_cli_trains_a_notebook_for_a_few_iterations(capsys):
    code = main(["run", str(QUICKSTART), "--iterations", "4", "--target-return", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "solved (≥ 1)" in out


def test_cli_reports_unsolved_with_status_1(capsys):
    code = main(["run", str(QUICKSTART), "--iterations", "1", "--steps", "4"])
    assert code == 1
    assert "was not reached" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "nowhere.ipynb"], "notebook not found: 'nowhere.ipynb'"),
        (["run", str(QUICKSTART), "--iterations", "0"], "--iterations must be a whole number ≥ 1"),
        (["run", str(QUICKSTART), "--policy", "sideways"], "unknown policy 'sideways'"),
        (["run", str(QUICKSTART), "--policy", "missing.json"], "policy file not found"),
    ],
)
def test_cli_errors_are_one_clear_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error:") and message in err and "Traceback" not in err


def test_cli_rejects_a_file_that_is_not_a_notebook(tmp_path, capsys):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    assert main(["run", str(bad)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_says_a_notebook_without_fragment_cells_is_not_for_it(tmp_path, capsys):
    """A notebook that builds its runs in Python (policies.ipynb) is refused before any of
    its cells runs: one line saying what workbench run trains and how to run it instead."""
    nb = tmp_path / "python_built.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise SystemExit('ran a cell')")]), nb)
    assert main(["run", str(nb)]) == 2
    err = capsys.readouterr().err
    assert "has no %%fragment cells" in err and "nbconvert --to notebook --execute" in err
    assert "ran a cell" not in err and len(err.strip().splitlines()) == 1


def test_cli_names_the_cell_of_a_broken_fragment(tmp_path, capsys):
    nb = nbformat.read(QUICKSTART, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if c.source.startswith("%%fragment actor\n"))
    nb.cells[index].source = "%%fragment actor\naction = (\n"
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "syntax error at cell line 1" in err and "fragment 'actor'" in err


def _nbval(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "-p",
            "no:cacheprovider",
            "-q",
            str(path),
            "-o",
            "addopts=",
            "--rootdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


#: the policies notebook's runs at CI size: 12 iterations each (policy auto tries its four
#: presets for 2 each, then keeps the fastest; the rates leave out the first 5), not until solved
POLICIES_CI = {"cfg = ppo.PPOConfig()": "cfg = ppo.PPOConfig(iterations=12)"}


def test_policies_notebook_runs_every_policy(tmp_path):
    """Every cell of the shipped notebook, its runs cut to 12 iterations (solving CartPole
    under each of six policies is the quickstart's and the solve tests' to show), and a last
    cell that checks each policy trained: its row, with env steps taken at a rate."""
    nb = json.loads((ROOT / "notebooks" / "policies.ipynb").read_text())
    found = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            for full, small in POLICIES_CI.items():
                found |= {full} if full in text else set()
                text = text.replace(full, small)
            cell["source"] = text
    assert found == set(POLICIES_CI), f"the notebook no longer sets {set(POLICIES_CI) - found}"
    check = "assert len(results) == len(POLICIES) and (results['env-steps/s'] > 0).all(), results\n"
    nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": check})
    copy = tmp_path / "policies_ci.ipynb"
    copy.write_text(json.dumps(nb))
    result = _nbval(copy, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_quickstart_executes_under_nbval_at_ci_size(tmp_path):
    """nbval runs every cell of the shipped notebook, with the iteration count cut to 2."""
    nb = json.loads(QUICKSTART.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            cell["source"] = text.replace("--iterations {cfg.iterations}", "--iterations 2")
    copy = tmp_path / "quickstart_ci.ipynb"
    copy.write_text(json.dumps(nb))
    result = _nbval(copy, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_after_training_notebook_executes_at_ci_size(tmp_path):
    """Evaluate, show, compare and sweep, every cell of the shipped notebook, with its runs cut
    to 2 iterations and its sweep to 2 seeds, its run store in tmp_path."""
    nb = json.loads((ROOT / "notebooks" / "after_training.ipynb").read_text())
    sizes = {"ITERATIONS = 300": "ITERATIONS = 2", "SEEDS = 10": "SEEDS = 2", "COMPARED = 3": "COMPARED = 2"}
    found = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            for full, small in sizes.items():
                if full in text:
                    found.add(full)
                    text = text.replace(full, small)
            cell["source"] = text
    assert found == set(sizes), f"the notebook no longer sets {set(sizes) - found}"
    copy = tmp_path / "after_training_ci.ipynb"
    copy.write_text(json.dumps(nb))
    result = _nbval(copy, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_cli_checkpoints_and_resumes(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    # 4 iterations are too few episodes for "solved" to be decided (exit 1): what matters
    # here is that the checkpoints are written and the next run resumes from them
    assert (
        main(
            [
                "run",
                str(QUICKSTART),
                "--iterations",
                "4",
                "--steps",
                "8",
                "--target-return",
                "1",
                "--checkpoint-dir",
                str(ckpt),
                "--checkpoint-every",
                "2",
            ]
        )
        == 1
    )
    assert (ckpt / "LATEST").exists()
    from workbench.runtime.state.checkpoint import load_checkpoint

    written = load_checkpoint(ckpt).iteration
    # too short to reach the notebook's target (exit 1), but it trains on from the checkpoint
    assert main(["run", str(QUICKSTART), "--iterations", "2", "--steps", "8", "--resume", str(ckpt)]) == 1
    assert "2/2 iterations" in capsys.readouterr().out and written >= 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--resume", "no-such-dir"], "no checkpoint at no-such-dir: the path does not exist"),
        (["--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint-dir"),
        (["--checkpoint-dir", "x", "--checkpoint-every", "0"], "--checkpoint-every must be a whole number ≥ 1"),
    ],
)
def test_cli_checkpoint_options_errors_are_one_clear_line(capsys, argv, message):
    assert main(["run", str(QUICKSTART), "--iterations", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error:") and message in err and "Traceback" not in err


def test_cli_ctrl_c_twice_exits_130_with_one_line_and_no_worker_left(tmp_path):
    """`workbench run` interrupted twice in a row (as users do): exit status 130, the
    interrupt's one line, no traceback, and the embedded cluster's worker processes gone."""
    import os
    import signal
    import time

    import psutil

    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLI_WITH_CTRL_C,
            "run",
            str(QUICKSTART),
            "--policy",
            "coarse",
            "--iterations",
            "100000",
            "--target-return",
            "1e9",
            "--no-progress",
            "--log-dir",
            str(logs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_rows(proc, logs / "metrics.csv")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the embedded cluster's workers should be running"
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert err.count("workbench: interrupted; every worker was released.") == 1, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    psutil.wait_procs(children, timeout=30)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "0"], "--workers must be a whole number ≥ 1, got 0"),
        (["--workers", "2", "--cluster", "tcp://127.0.0.1:1"], "--workers sizes the embedded cluster"),
    ],
)
def test_cli_workers_errors_are_one_clear_line(capsys, argv, message):
    assert main(["run", str(QUICKSTART), "--policy", "coarse", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_workers_sizes_the_embedded_cluster(tmp_path):
    """--workers N starts N workers (default: one per core, at least 2), in a process of its
    own so that no cluster of this test session is reused."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "run",
            str(QUICKSTART),
            "--policy",
            "coarse",
            "--workers",
            "3",
            "--iterations",
            "6",
            "--target-return",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "started a local Dask cluster (3 workers on 127.0.0.1" in proc.stdout


def _start_order(monkeypatch, notebook, *argv) -> list[str]:
    """What `workbench run` did first: start the embedded cluster, or load the notebook
    (stopped right there with an error, so no cluster or training runs)."""
    import workbench.cluster.connect as connect
    import workbench.notebook as notebook_module
    from workbench.errors import RunConfigError

    order: list[str] = []
    monkeypatch.setattr(connect, "start_embedded_in_background", lambda *a, **k: order.append("start"))

    def load(*args, **kwargs):
        order.append("load")
        raise RunConfigError("stopped by the test after the notebook load began")

    monkeypatch.setattr(notebook_module, "load_notebook", load)
    assert main(["run", str(notebook), *argv]) == 2
    return order


def test_a_cluster_policy_starts_the_embedded_cluster_while_the_notebook_loads(monkeypatch, tmp_path):
    assert _start_order(monkeypatch, QUICKSTART, "--policy", "coarse") == ["start", "load"]
    assert _start_order(monkeypatch, QUICKSTART) == ["load"]  # inline
    assert _start_order(monkeypatch, QUICKSTART, "--policy", "coarse", "--cluster", "tcp://127.0.0.1:1") == [
        "load"
    ]  # its own cluster
    nb = nbformat.read(QUICKSTART, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("from distributed import Client\nclient = Client()"))
    own = tmp_path / "own_client.ipynb"
    nbformat.write(nb, own)
    assert _start_order(monkeypatch, own, "--policy", "coarse") == ["load"]  # it may make one


def test_the_command_skips_the_exit_collection_after_closing_what_it_opened(tmp_path):
    """``workbench`` (console_main) returns main's exit status and leaves the objects it
    made frozen, so that the interpreter's exit skips a cycle collection over them; main
    itself, which tests and scripts call in a process that goes on, does not freeze."""
    code = (
        "import gc, sys\nfrom workbench.cli import console_main, main\n"
        "status = main(['run', sys.argv[1]])\nfrozen_by_main = gc.get_freeze_count()\n"
        "status2 = console_main(['run', sys.argv[1]])\n"
        "print('RESULT', status, frozen_by_main, status2, gc.get_freeze_count() > 0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "missing.ipynb")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "RESULT 2 0 2 True" in out.stdout, (out.stdout, out.stderr)
