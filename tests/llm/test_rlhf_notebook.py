"""notebooks/rlhf.ipynb: the module's cells byte for byte, and it runs top to bottom at CI size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "rlhf.ipynb"


def test_rlhf_notebook_cells_are_the_library_algorithm_byte_for_byte():
    from tests.conftest import assert_notebook_is_the_module
    from workbench.algorithms import rlhf

    _, options = assert_notebook_is_the_module(NOTEBOOK, rlhf)
    assert options["steps"] == 1


def test_rlhf_notebook_executes_under_nbval_at_ci_size(tmp_path):
    """Every cell runs (warm start, preference pairs, the reward model's training, GRPO
    against it, before/after) with the budget knobs cut down."""
    from tests.test_cli_and_notebooks import _nbval

    nb = json.loads(NOTEBOOK.read_text())
    cuts = {"GRPOConfig(kl_coef=0.2)": "GRPOConfig(kl_coef=0.2, iterations=3, warm_start_steps=10, eval_every=1)",
            "preference_pairs, reward_model_steps = 4096, 800": "preference_pairs, reward_model_steps = 64, 5"}
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for knob in cuts:  # the knobs the cut relies on
        assert sum(knob in s for s in sources) == 1, knob
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            for knob, cut in cuts.items():
                text = text.replace(knob, cut)
            cell["source"] = text
    copy = tmp_path / "rlhf_ci.ipynb"
    copy.write_text(json.dumps(nb))
    result = _nbval(copy, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
