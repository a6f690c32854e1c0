"""Fixtures for tests with real hosts: network namespaces (``tests/hosts/netns.py``), a
``dask scheduler`` in the first, one ``dask worker --nthreads 1`` in each of the others,
started from the command line as a user would. Skipped, with the reason, where namespaces
cannot be made (not root, no iproute2, a container without CAP_SYS_ADMIN)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hosts.netns import Hosts, unavailable

SCHEDULER_PORT = 8786
DASHBOARD_PORT = 8787
DRIVER = Path(__file__).with_name("drive_run.py")


@pytest.fixture(scope="module")
def hosts():
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    net = Hosts(3)
    try:
        yield net
    finally:
        net.close()


class HostCluster:
    """A scheduler on host 0 and a worker on each other host, all stopped at the end."""

    def __init__(self, net: Hosts, log_dir: Path) -> None:
        self.net = net
        self.address = f"tcp://{net.addresses[0]}:{SCHEDULER_PORT}"
        self.dashboard = f"http://{net.addresses[0]}:{DASHBOARD_PORT}"
        self.log_dir = log_dir
        self.procs = [
            net.popen(
                0,
                [
                    "dask",
                    "scheduler",
                    "--host",
                    net.addresses[0],
                    "--port",
                    str(SCHEDULER_PORT),
                    "--dashboard-address",
                    f"{net.addresses[0]}:{DASHBOARD_PORT}",
                    "--preload",
                    "workbench.cluster.dashboard",
                ],
                log=self._log("scheduler"),
            )
        ]
        for i in range(1, len(net.names)):
            self.procs.append(
                net.popen(
                    i,
                    ["dask", "worker", self.address, "--nthreads", "1", "--name", f"w{i}", "--no-dashboard"],
                    log=self._log(f"worker{i}"),
                )
            )

    def _log(self, name: str):
        return open(self.log_dir / f"{name}.log", "w")

    def drive(self, timeout: float = 240.0, **spec) -> dict:
        """Run ``drive_run.py`` on host 0 with ``spec``; its result (or a failure that shows
        the processes' logs)."""
        spec = {
            "scheduler": self.address,
            "workers": len(self.procs) - 1,
            "iterations": 12,
            "hosts": self.net.addresses,
            "names": self.net.names,
            "switch": self.net.switch,
            **spec,
        }
        try:
            done = self.net.run(0, [sys.executable, str(DRIVER), json.dumps(spec)], timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the run did not end within {timeout:g} s\n{exc.stdout}\n{self.logs()}")
        line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            pytest.fail(
                f"the run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}\n{self.logs()}"
            )
        return {**json.loads(line[len("RESULT ") :]), "rc": done.returncode, "stdout": done.stdout}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.log_dir.glob("*.log")))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                import os
                import signal

                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture()
def host_cluster(hosts, tmp_path):
    """Fresh scheduler and worker processes for each test (a test breaks one of them);
    every link plugged back in afterwards."""
    cluster = HostCluster(hosts, tmp_path)
    try:
        yield cluster
    finally:
        cluster.close()
        for i in range(len(hosts.names)):
            hosts.link(i, True)
            hosts.throttle(i, None)
        time.sleep(0.2)  # the next test's scheduler binds the same port
