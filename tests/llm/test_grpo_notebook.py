"""notebooks/grpo.ipynb: the module's cells byte for byte, and it runs top to bottom at CI size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "grpo.ipynb"


def test_grpo_notebook_cells_are_the_library_algorithm_byte_for_byte():
    from tests.conftest import assert_notebook_is_the_module
    from workbench.algorithms import grpo

    _, options = assert_notebook_is_the_module(NOTEBOOK, grpo)
    assert options["steps"] == 1


def test_grpo_notebook_executes_under_nbval_at_ci_size(tmp_path):
    """Every cell runs (warm start, GRPO, before/after) with the budget knobs cut down."""
    from tests.test_cli_and_notebooks import _nbval

    nb = json.loads(NOTEBOOK.read_text())
    budget = "GRPOConfig(iterations=3, warm_start_steps=10, eval_every=1)"
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert sum("cfg = GRPOConfig()" in s for s in sources) == 1  # the knob the cut relies on
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = "".join(cell["source"]).replace("GRPOConfig()", budget)
    copy = tmp_path / "grpo_ci.ipynb"
    copy.write_text(json.dumps(nb))
    result = _nbval(copy, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_cli_runs_the_grpo_notebook_headless(capsys):
    """The warm start's cell runs too (it hands the fragments their model by ``cfg.model =
    start``, a change in place), and the summary says the prog_bar metrics GRPO logs."""
    from workbench.cli import main

    code = main(["run", str(NOTEBOOK), "--iterations", "2", "--set", "cfg.warm_start_steps=5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "after 5 supervised steps" in out  # the warm start's own print
    assert "2/2 iterations" in out and "reward_mean" in out and "generate_tokens_per_s" in out
    assert "mean return" not in out  # no episodes: the run's own metrics instead
