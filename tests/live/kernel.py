"""A real Jupyter kernel driven the way a notebook front end drives it (``jupyter_client``).

:class:`Kernel` starts an ipykernel in a process of its own, executes cells and collects
what they printed and displayed from the iopub channel, and interrupts the kernel the way
Kernel ▸ Interrupt does (SIGINT to the kernel's process group). The quickstart's cells are
read from ``notebooks/quickstart.ipynb``, so the tests run what users run.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"


def quickstart_cells() -> list[str]:
    """The quickstart's setup and fragment cells, in order (not %fdg, not the results)."""
    import nbformat

    nb = nbformat.read(QUICKSTART, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return [c for c in code if c.startswith(("%load_ext", "from workbench", "%%fragment"))]


def learner_cell() -> str:
    """The quickstart's per-iteration learner cell (the one a user edits)."""
    return next(c for c in quickstart_cells() if c.startswith("%%fragment learner\n"))


@dataclass
class Reply:
    """What one executed cell showed: its streams and displayed text, and how it ended."""

    status: str
    stdout: str = ""
    stderr: str = ""
    displayed: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def text(self) -> str:
        return self.stdout + self.stderr + "".join(self.displayed) + (self.error or "")


class Kernel:
    """An ipykernel subprocess (``python3``, this Python) with a client on all channels."""

    def __init__(self, cwd: Path) -> None:
        pytest.importorskip("ipykernel")
        manager = pytest.importorskip("jupyter_client.manager")
        self.manager = manager.KernelManager(kernel_name="python3")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def send(self, code: str) -> str:
        """Start executing ``code``; returns its message id (see :meth:`collect`)."""
        return self.client.execute(code, store_history=True)

    def _replies(self, get, msg_id: str, timeout: float, late):
        """The messages answering ``msg_id`` on one channel (``get``: the client's
        ``get_iopub_msg`` or ``get_shell_msg``), until ``timeout``; then ``TimeoutError(late())``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(late())
            try:
                msg = get(timeout=min(left, 5.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                yield msg
            # else: output of a background thread to an earlier cell, or a widget update

    def collect(self, msg_id: str, timeout: float) -> Reply:
        """What the cell ``msg_id`` showed, once the kernel is idle after it."""
        reply = Reply(status="ok")
        late = lambda: f"the cell did not finish within {timeout:g} s; so far:\n{reply.text[-3000:]}"  # noqa: E731
        for msg in self._replies(self.client.get_iopub_msg, msg_id, timeout, late):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    reply.stdout += content["text"]
                else:
                    reply.stderr += content["text"]
            elif kind in ("display_data", "execute_result"):
                reply.displayed.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                reply.status = "error"
                reply.error = f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                return reply

    def execute(self, code: str, timeout: float = 300.0) -> Reply:
        return self.collect(self.send(code), timeout)

    def ok(self, code: str, timeout: float = 300.0) -> Reply:
        """Execute ``code``; fail the test, showing the error, unless it ran without one."""
        reply = self.execute(code, timeout)
        assert reply.status == "ok", f"cell failed:\n{code}\n---\n{reply.text[-4000:]}"
        return reply

    def value(self, expression: str, timeout: float = 300.0):
        """The JSON value of ``expression`` in the kernel.

        It comes back in the execute reply's ``user_expressions`` (shell channel), not in
        printed text: a background run printing at the same moment can carry a cell's
        stdout off under another parent message (seen once in CI on a busy machine).
        """
        msg_id = self.client.execute(
            "", silent=True, store_history=False, user_expressions={"v": f"__import__('json').dumps({expression})"}
        )
        msg = next(
            self._replies(
                self.client.get_shell_msg,
                msg_id,
                timeout,
                lambda: f"no reply to evaluating {expression!r} within {timeout:g} s",
            )
        )
        result = msg["content"]["user_expressions"]["v"]
        assert result["status"] == "ok", (
            f"evaluating {expression!r} failed: {result.get('ename')}: {result.get('evalue')}"
        )
        return json.loads(ast.literal_eval(result["data"]["text/plain"]))

    def wait_for(self, expression: str, what: str, timeout: float = 300.0, every: float = 0.5) -> None:
        """Poll until ``expression`` is true in the kernel (the kernel stays responsive while
        a background run trains)."""
        deadline = time.monotonic() + timeout
        while not self.value(f"bool({expression})"):
            assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
            time.sleep(every)

    def interrupt(self) -> None:
        """Kernel ▸ Interrupt: SIGINT to the kernel's process group (as Jupyter sends it)."""
        self.manager.interrupt_kernel()

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)  # a clean exit closes the embedded cluster too


def applies_from(text: str, what: str) -> int:
    """The iteration a change's notice says it applies from."""
    found = re.search(rf"workbench: {re.escape(what)}, applies from iteration (\d+)", text)
    assert found, f"no notice {what!r} … applies from iteration N in:\n{text[-3000:]}"
    return int(found.group(1))
