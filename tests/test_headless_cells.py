"""Which ordinary cells a headless run (`workbench run`, `load_notebook`) runs: those that
define what the fragments read, those that change it in place (`cfg.model = start`, the
GRPO notebook's warm start), and what those need; never a cell that only looks at results."""

from __future__ import annotations

import json

import pytest

from workbench.notebook import load_notebook


def _notebook(tmp_path, *cells: str):
    path = tmp_path / "nb.ipynb"
    path.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {"cell_type": "code", "source": c, "metadata": {}, "outputs": [], "execution_count": None}
                    for c in cells
                ],
            }
        )
    )
    return path


FRAGMENTS = (
    "%%fragment env\nobs = np.zeros(2) + cfg.scale\nreward = np.ones(2)\n",
    "%%fragment learner\nwb.log('seen/scale', float(obs.mean()))\n",
)


@pytest.mark.parametrize(
    "change",
    [
        "cfg.scale = helper() * 3",  # an attribute, through a helper only this cell reads
        "cfg.__dict__['scale'] = helper() * 3",  # an item of an attribute
        "cfg.scale += helper() * 3 - 1",  # augmented
        "first, cfg.scale = 0, helper() * 3",  # one target of several
    ],
)
def test_a_cell_that_changes_what_the_fragments_read_in_place_runs_headless(tmp_path, change):
    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "class Config:\n    scale = 1.0\ncfg = Config()",
        "def helper():\n    return 2.0",
        change,
        "raise RuntimeError('a cell that only looks at results must not run headless')\nprint(cfg)",
        *FRAGMENTS,
        "%fdg run --iterations 1 --steps 1",
    )
    fdg, options = load_notebook(path)
    run = fdg.run(progress=False, **options)
    assert run.metrics["seen/scale"].tolist() == [6.0]


def test_a_cell_that_changes_a_name_no_fragment_reads_does_not_run(tmp_path):
    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "class Config:\n    scale = 1.0\ncfg = Config()",
        "class Plot:\n    pass\nfig = Plot()",
        "fig.title = 'x'\nraise RuntimeError('not needed: nothing the fragments read')",
        *FRAGMENTS,
        "%fdg run --iterations 1 --steps 1",
    )
    fdg, options = load_notebook(path)
    assert fdg.run(progress=False, **options).metrics["seen/scale"].tolist() == [1.0]


def test_cells_after_the_run_line_never_run_before_it(tmp_path):
    """A change of the config after the run (for a background run, with %fdg update) and a
    later redefinition are not what the run sees at its line."""
    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "class Config:\n    scale = 1.0\ncfg = Config()",
        *FRAGMENTS,
        "run = %fdg run --iterations 1 --steps 1",
        "cfg.scale = 50.0\n%fdg update cfg",
        "class Config:\n    scale = 70.0\ncfg = Config()",
    )
    fdg, options = load_notebook(path)
    assert fdg.run(progress=False, **options).metrics["seen/scale"].tolist() == [1.0]


def test_fragment_cells_after_the_run_line_are_not_part_of_the_run(tmp_path):
    """In Jupyter a %%fragment cell below the run line runs after the run started (a live
    edit of a background run, or the next experiment); headless, the run is the FDG at its
    line. A new fragment, and a redefinition of one, below it are left out."""
    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "class Config:\n    scale = 1.0\ncfg = Config()",
        *FRAGMENTS,
        "run = %fdg run --iterations 1 --steps 1",
        "%%fragment learner\nwb.log('seen/scale', 99.0)\n",
        "%%fragment probe\nraise RuntimeError('a fragment cell below the run line ran')\n",
    )
    fdg, options = load_notebook(path)
    assert sorted(fdg.fragments) == ["env", "learner"]
    assert fdg.run(progress=False, **options).metrics["seen/scale"].tolist() == [1.0]


def test_a_cell_that_is_not_python_is_named_when_the_fragments_miss_what_it_may_define(tmp_path):
    """`cfg = (` is a syntax error: the fragments' cfg is then defined by no cell, and the
    error names that cell and its syntax error (it said only "not defined")."""
    from workbench.errors import NotebookCellError

    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "cfg = (",
        *FRAGMENTS,
        "%fdg run --iterations 1 --steps 1",
    )
    with pytest.raises(
        NotebookCellError,
        match=r"the fragments read 'cfg', which no cell that runs headless "
        r"defines, and code cell 2 is not Python \(line 1: ",
    ):
        load_notebook(path)


def test_a_cell_of_ipython_syntax_is_no_error_when_the_fragments_have_what_they_read(tmp_path):
    path = _notebook(
        tmp_path,
        "import numpy as np\nimport workbench as wb",
        "class Config:\n    scale = 1.0\ncfg = Config()",
        "Config?",
        "len??",
        *FRAGMENTS,
        "%fdg run --iterations 1 --steps 1",
    )
    fdg, options = load_notebook(path)
    assert fdg.run(progress=False, **options).metrics["seen/scale"].tolist() == [1.0]
