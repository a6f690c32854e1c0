"""workbench.notebook.notebook_cells reads a notebook's code cells as nbformat does, without
importing nbformat for version 4 (its import costs ~1.2 s of every `workbench run`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from workbench.errors import RunConfigError
from workbench.notebook import notebook_cells

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_shipped_notebooks_read_as_nbformat_reads_them(path):
    expected = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert notebook_cells(path) == expected


def test_a_version_4_notebook_does_not_import_nbformat():
    code = (
        "import sys; from workbench.notebook import notebook_cells; "
        f"notebook_cells({str(NOTEBOOKS[0])!r}); print('nbformat' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_older_notebook_goes_through_nbformats_conversion(tmp_path):
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": "old"},
        "worksheets": [
            {
                "metadata": {},
                "cells": [
                    {
                        "cell_type": "code",
                        "input": "x = 1",
                        "language": "python",
                        "outputs": [],
                        "collapsed": False,
                        "metadata": {},
                    },
                    {"cell_type": "markdown", "source": "# t", "metadata": {}},
                ],
            }
        ],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3))
    assert notebook_cells(path) == ["x = 1"]


@pytest.mark.parametrize(
    "text", ["{not json", json.dumps({"nbformat": 4, "cells": [{"cell_type": "code", "source": 3}]}), "[1, 2]"]
)
def test_what_is_not_a_notebook_is_said_so(tmp_path, text):
    path = tmp_path / "bad.ipynb"
    path.write_text(text)
    with pytest.raises(RunConfigError, match=r"cannot read .*bad\.ipynb.* as a notebook"):
        notebook_cells(path)


def test_a_python_script_is_said_to_be_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    with pytest.raises(
        RunConfigError,
        match=r"is a Python script: `workbench run` trains a notebook's "
        r"%%fragment cells \(an .ipynb\). Run a script that builds its FDG "
        r"with `python .*train.py`",
    ):
        notebook_cells(script)
