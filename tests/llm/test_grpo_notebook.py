"""notebooks/grpo.ipynb and notebooks/rlhf.ipynb: each its module's cells byte for byte, and each runs
top to bottom at CI size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "grpo.ipynb"


#: each notebook (and its module, workbench.algorithms.NAME) and the cuts that run it at CI size (knob → cut)
NOTEBOOKS = {
    "grpo": {"GRPOConfig()": "GRPOConfig(iterations=3, warm_start_steps=10, eval_every=1)"},
    "rlhf": {
        "GRPOConfig(kl_coef=0.2)": "GRPOConfig(kl_coef=0.2, iterations=3, warm_start_steps=10, eval_every=1)",
        "preference_pairs, reward_model_steps = 4096, 800": "preference_pairs, reward_model_steps = 64, 5",
    },
}


def _at_ci_size(name: str, tmp_path: Path) -> Path:
    """A copy of the notebook with its budget knobs cut down (each knob in one cell, none in a
    fragment: the copy's fragment cells are the notebook's own)."""
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for knob in NOTEBOOKS[name]:  # the knobs the cut relies on
        assert sum(knob in s for s in sources) == 1, knob
        assert not any(knob in s for s in sources if s.startswith("%%fragment")), knob
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            for knob, cut in NOTEBOOKS[name].items():
                text = text.replace(knob, cut)
            cell["source"] = text
    copy = tmp_path / f"{name}_ci.ipynb"
    copy.write_text(json.dumps(nb))
    return copy


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebook_cells_are_the_library_algorithm_byte_for_byte(name, tmp_path):
    """The notebook's fragment cells are its module's, and build its FDG. Building it runs
    the ordinary cells the fragments read (the warm start, RLHF's reward model): at CI size
    here, in a copy whose fragment cells are the notebook's byte for byte."""
    import importlib

    import nbformat

    from tests.conftest import assert_notebook_is_the_module

    def fragment_cells(path):
        return [c.source for c in nbformat.read(path, as_version=4).cells if c.source.startswith("%%fragment")]

    shipped, copy = ROOT / "notebooks" / f"{name}.ipynb", _at_ci_size(name, tmp_path)
    assert fragment_cells(copy) == fragment_cells(shipped)
    module = importlib.import_module(f"workbench.algorithms.{name}")
    _, options = assert_notebook_is_the_module(copy, module)
    assert options["steps"] == 1


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebook_executes_under_nbval_at_ci_size(name, tmp_path):
    """Every cell runs (warm start, GRPO, before/after; RLHF's preference pairs and reward
    model too) with the budget knobs cut down."""
    from tests.test_cli_and_notebooks import _nbval

    result = _nbval(_at_ci_size(name, tmp_path), tmp_path)
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
