"""%fdg evaluate / %fdg show through a real InteractiveShell, and `workbench run --evaluate N`."""

from __future__ import annotations

import nbformat
import pytest

from workbench.cli import main
from workbench.evaluation import EvaluationResult, Video

CARTPOLE_CELLS = (
    "%%fragment env --init\nenvs = wb.envs.make('CartPole-v1', num_envs=4, seed=replica.index)\nobs = envs.reset()\n",
    "%%fragment actor\naction = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)\n",
    "%%fragment env\nobs, reward, terminated, truncated, info = envs.step(action)\n"
    "wb.log('charts/episodic_return', info['episode_return'])\n",
    "%%fragment learner\nwb.log('rollout/reward', float(reward.sum()))\n",
)


def _cells(ip, *cells):
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec or result.error_before_exec


def test_fdg_evaluate_and_show_play_the_last_run(ip):
    _cells(ip, *CARTPOLE_CELLS, "run = %fdg run --iterations 1 --steps 4 --no-progress")
    result = ip.run_line_magic("fdg", "evaluate --episodes 3 --seed 11")
    assert isinstance(result, EvaluationResult) and result.episodes == 3 and result.seeds == (11,)
    video = ip.run_line_magic("fdg", "show")
    assert isinstance(video, Video) and video.result.episodes == 1


def test_fdg_evaluate_refuses_bad_lines_as_usage_errors(ip, capsys):
    result = ip.run_cell("%fdg evaluate")
    assert not result.success and "nothing has run yet: %fdg run first, then %fdg evaluate" in capsys.readouterr().err
    _cells(ip, *CARTPOLE_CELLS, "run = %fdg run --iterations 1 --steps 4 --no-progress")
    for line, message in [
        ("evaluate --episodes 0", "episodes must be a whole number ≥ 1"),
        ("evaluate --episodes", "--episodes needs a value"),
        ("show --fast", "unknown option '--fast'"),
    ]:
        result = ip.run_cell(f"%fdg {line}")
        err = capsys.readouterr().err
        assert not result.success and "UsageError" in err and message in err


@pytest.fixture
def cartpole_notebook(tmp_path) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench\nimport numpy as np\nimport workbench as wb"),
        *(nbformat.v4.new_code_cell(cell) for cell in CARTPOLE_CELLS),
        nbformat.v4.new_code_cell("run = %fdg run --iterations 1 --steps 4"),
    ]
    path = tmp_path / "cartpole.ipynb"
    nbformat.write(nb, path)
    return str(path)


def test_workbench_run_evaluate_prints_the_evaluation(cartpole_notebook, capsys):
    assert main(["run", cartpole_notebook, "--evaluate", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "evaluation: 4 episodes: return mean" in out and "held-out env seeds 1000000" in out


def test_workbench_run_refuses_evaluate_0_before_training(cartpole_notebook, capsys):
    assert main(["run", cartpole_notebook, "--evaluate", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "workbench: error: --evaluate must be a whole number of episodes ≥ 1, got 0."
