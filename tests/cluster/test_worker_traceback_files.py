"""A fragment's error on a worker names, in its traceback, the file or cell the user wrote
each frame's code in — not cloudpickle's ``<dynamic-code>``, the file it gives every
function and class it sends by value (a script's or a notebook's ``__main__``):

- code from a script (``python train.py``, or any namespace with ``__file__``): the
  script's path and line, with the line's text, the same frames as inline;
- code from a notebook cell: the cell, by the class or function it defines, and the line
  in it;
- a class a fragment's own cell defines, sent back to a worker inside a kept state: that
  fragment cell, with its line's text.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import workbench as wb

#: a user's env module: Walker.step calls a function that raises (lines 11 and 15)
SCRIPT = textwrap.dedent("""\
    import numpy as np

    class Walker:
        def __init__(self, n):
            self.n = n

        def reset(self):
            return np.zeros((self.n, 2))

        def step(self, action):
            return _fall(action)


    def _fall(action):
        raise ValueError("the walker fell")


    def make_walker(n):
        return Walker(n)
    """)

FRAGMENTS = (
    ("env", "walker = make_walker(2)\nobs = walker.reset()", "init"),
    ("actor", "action = obs + 1", "step"),
    ("env", "obs = walker.step(action)\nreward = np.ones(2)", "step"),
    ("learner", "seen = reward.shape[0]", "iteration"),
)


def _fdg(namespace: dict) -> wb.FDG:
    fdg = wb.FDG(namespace=namespace)
    for name, code, rate in FRAGMENTS:
        fdg.add_fragment(name, code, rate=rate)
    return fdg


def _frames(text: str) -> list[tuple[str, int, str]]:
    """(file, line, function) of each frame of a traceback's text."""
    return [(f, int(n), name) for f, n, name in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)]


def _failure(fdg: wb.FDG, policy: str, client, **options) -> wb.FragmentRuntimeError:
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(
            iterations=2,
            steps=2,
            policy=policy,
            cluster=client if policy != "inline" else None,
            progress=False,
            **options,
        )
    return info.value


@pytest.fixture
def script(tmp_path) -> tuple[str, dict]:
    """SCRIPT's file and the namespace running it as ``python FILE`` does."""
    path = tmp_path / "walker_env.py"
    path.write_text(SCRIPT)
    namespace = {"__name__": "__main__", "__file__": str(path)}
    exec(compile(SCRIPT, str(path), "exec"), namespace)
    return str(path), namespace


def test_a_scripts_class_and_function_name_the_script_and_line_on_a_worker_as_inline(script, client):
    path, namespace = script
    on_worker = _failure(_fdg(namespace), "coarse", client)
    text = on_worker.traceback_text
    assert "<dynamic-code>" not in text
    assert [f for f in _frames(text) if f[0] == path] == [(path, 11, "step"), (path, 15, "_fall")]
    assert 'raise ValueError("the walker fell")' in text  # the script's line, read on the worker
    inline = _failure(_fdg(namespace), "inline", client)
    assert _frames(text) == _frames(inline.traceback_text)
    assert on_worker.fragment == "env" and on_worker.line == 1  # the cell line, as before


def test_a_script_run_with_python_on_a_cluster_names_itself(tmp_path, client):
    path = tmp_path / "train.py"
    path.write_text(
        SCRIPT
        + textwrap.dedent(f"""\


        if __name__ == "__main__":
            import workbench as wb
            fdg = wb.FDG(namespace=globals())
            for name, code, rate in {FRAGMENTS!r}:
                fdg.add_fragment(name, code, rate=rate)
            try:
                fdg.run(iterations=1, steps=2, policy="coarse", cluster={client.scheduler.address!r},
                        progress=False)
            except wb.FragmentRuntimeError as exc:
                print(exc.traceback_text)
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(Path(wb.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "<dynamic-code>" not in done.stdout
    frames = _frames(done.stdout)
    assert (str(path), 11, "step") in frames and (str(path), 15, "_fall") in frames, done.stdout


def test_a_notebook_cells_class_names_the_cell_that_defines_it_and_the_line(ip, client):
    ip.run_cell(SCRIPT)
    for name, code, rate in FRAGMENTS:
        flag = " --init" if rate == "init" else f" --every {rate}"
        assert ip.run_cell(f"%%fragment {name}{flag}\n{code}\n").success
    fdg = ip.magics_manager.registry["WorkbenchMagics"].fdg
    text = _failure(fdg, "coarse", client).traceback_text
    assert "<dynamic-code>" not in text
    frames = _frames(text)
    assert ("<notebook cell defining Walker>", 11, "step") in frames, text
    assert ("<notebook cell defining _fall>", 15, "_fall") in frames, text


#: a fragment whose init cell defines the env class; its step raises from the 4th step on
OWN_CLASS = textwrap.dedent("""\
    class Counter:
        def __init__(self):
            self.t = 0

        def step(self):
            self.t += 1
            if self.t > 3:
                raise RuntimeError("counted too far")
            return np.full(2, float(self.t))

    counter = Counter()
    obs = np.zeros(2)
    """)


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_class_of_a_fragment_cell_sent_in_a_kept_state_names_that_cell(policy, client):
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", OWN_CLASS, rate="init")
    fdg.add_fragment("env", "obs = counter.step()\nreward = obs.copy()", rate="step")
    fdg.add_fragment("learner", "seen = reward.shape[0]", rate="iteration")
    cluster = client if policy != "inline" else None
    first = fdg.run(iterations=1, steps=2, policy=policy, cluster=cluster, progress=False)
    assert first.status == "finished", first.error
    # the kept state holds the Counter, pickled by value; the resume sends it back
    text = _failure(fdg, policy, client, resume=first.state).traceback_text
    assert "<dynamic-code>" not in text
    assert ("<fragment env:init>", 8, "step") in _frames(text), text
    assert 'raise RuntimeError("counted too far")' in text
