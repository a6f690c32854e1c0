"""Losing the Dask scheduler mid-run stops the run with a SchedulerLostError that names
the scheduler's address, the iteration and the newest checkpoint — not a bare "stalled".

A real scheduler process (``dask scheduler`` on a free loopback port) and a 2-worker
``dask worker`` are started by the test in their own sessions, and the scheduler is killed
(SIGKILL) once the run has written a checkpoint. Every process started here is killed by
its process group at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from distributed import Client

from workbench.errors import SchedulerLostError
from tests.cluster.test_fine_worker_loss_counts import counting_fdg

#: how long the test's client would try to reconnect to a lost scheduler
RECONNECT_S = 60.0
DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _started(command: list[str], log: Path, env: dict | None = None):
    """A process in its own session (so its children end with it), killed at the end."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait_for_workers(address: str, count: int, timeout: float = 30.0) -> None:
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(count, timeout=timeout)


def test_killing_the_scheduler_mid_run_names_it_and_the_newest_checkpoint(tmp_path):
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    ckpt = tmp_path / "ckpt"
    started = time.monotonic()
    with (
        _started(
            DASK + ["--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], tmp_path / "scheduler.log"
        ) as scheduler,
        _started(
            WORKER + [address, "--nthreads", "1", "--nworkers", "2", "--no-dashboard"],
            tmp_path / "worker.log",
            env={"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"},
        ),
    ):
        _wait_for_workers(address, 2)

        killed: list[float] = []

        def kill_once_checkpointed():
            deadline = time.monotonic() + 15
            while not (ckpt / "LATEST").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(scheduler.pid, signal.SIGKILL)
            killed.append(time.monotonic())

        # a client that would try to reconnect for a whole minute: the run must not wait
        # for that (it did: 10 s, Dask's default, in the liveness call, the stop and the
        # report relay's close, one after the other)
        client = Client(address, timeout=RECONNECT_S, set_as_default=False)
        killer = threading.Thread(target=kill_once_checkpointed, daemon=True)
        killer.start()
        with pytest.raises(SchedulerLostError) as info:
            counting_fdg(sleep_s=0.2).run(
                iterations=80,
                steps=8,
                policy="coarse",
                cluster=client,
                checkpoint_dir=str(ckpt),
                checkpoint_every=2,
                progress=False,
            )
        raised = time.monotonic()
        killer.join(timeout=5)
        assert killed and raised - killed[0] < RECONNECT_S / 2, f"{raised - killed[0]:.1f} s after the kill"
        client.close(timeout=1)
    text = str(info.value)
    assert f"the Dask scheduler at {address} was lost at iteration" in text, text
    assert info.value.address == address and info.value.iteration > 0
    assert "intact (newest: " in text and str(ckpt) in text and "--resume" in text, text
    assert info.value.newest is not None and Path(info.value.newest).parent == ckpt
    assert time.monotonic() - started < 90
