"""Hosts for tests: network namespaces joined by a bridge, each with its own address.

:class:`Hosts` builds ``count`` hosts (namespaces ``PREFIX-h0``…) plus a switch namespace
holding the bridge, so no address or link exists outside the namespaces it creates:
host ``i`` is ``10.213.N.(i+1)/24`` on its ``eth0``, with ``N`` chosen per run. Processes
start inside a host with :meth:`Hosts.popen`; :meth:`Hosts.link` takes a host's cable out
of the switch and puts it back. :meth:`Hosts.close` kills every process started and deletes
the namespaces (their links and the bridge go with them), whatever state they are in.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

__all__ = ["Hosts", "throttle", "unavailable"]


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=20)


def unavailable() -> str | None:
    """Why namespace hosts cannot be built here (None: they can)."""
    if os.geteuid() != 0:
        return "network-namespace hosts need root (ip netns add)"
    if shutil.which("ip") is None:
        return "network-namespace hosts need iproute2's `ip` (apt-get install -y iproute2)"
    probe = f"wbprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def throttle(switch: str, host_ns: str, index: int, rate: str | None) -> None:
    """Make the cable of host ``index`` (namespace ``host_ns``) slow both ways: a token
    bucket of ``rate`` (such as "256kbit") queueing up to 1 s (these kernels lack netem's
    delay); None makes it fast again. Namespaces are reused between tests: whoever
    throttles unthrottles."""
    for ns, dev in ((switch, f"port{index}"), (host_ns, "eth0")):
        subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=20
        )  # none there: fine
        if rate is not None:
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    "16kbit",
                    "latency",
                    "1s",
                ],
                check=True,
                capture_output=True,
                timeout=20,
            )


class Hosts:
    """``count`` hosts on one bridge (see the module docstring)."""

    def __init__(self, count: int = 3) -> None:
        tag = os.getpid() % 100000
        self.prefix = f"wb{tag}"
        self.subnet = f"10.213.{tag % 250 + 1}"
        self.switch = f"{self.prefix}-sw"
        self.names = [f"{self.prefix}-h{i}" for i in range(count)]
        self.addresses = [f"{self.subnet}.{i + 1}" for i in range(count)]
        self.procs: list[subprocess.Popen] = []
        self.logs: list = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
        _ip("link", "set", "br0", "up", ns=self.switch)
        for i, (name, address) in enumerate(zip(self.names, self.addresses)):
            _ip("netns", "add", name)
            _ip("link", "set", "lo", "up", ns=name)
            # the pair is made inside the host, its far end moved to the switch
            _ip("link", "add", "eth0", "type", "veth", "peer", "name", f"port{i}", ns=name)
            _ip("link", "set", f"port{i}", "netns", self.switch, ns=name)
            _ip("addr", "add", f"{address}/24", "dev", "eth0", ns=name)
            _ip("link", "set", "eth0", "up", ns=name)
            _ip("link", "set", f"port{i}", "master", "br0", ns=self.switch)
            _ip("link", "set", f"port{i}", "up", ns=self.switch)

    def popen(self, host: int, args: list[str], log=None, **kwargs) -> subprocess.Popen:
        """Start ``args`` inside host ``host`` (its own process group, for cleanup)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.names[host], *args],
            start_new_session=True,
            stdout=log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
            **kwargs,
        )
        self.procs.append(proc)
        return proc

    def run(self, host: int, args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """Run ``args`` inside host ``host`` to completion."""
        return subprocess.run(
            ["ip", "netns", "exec", self.names[host], *args], timeout=timeout, capture_output=True, text=True, **kwargs
        )

    def link(self, host: int, up: bool) -> None:
        """Plug host ``host``'s cable out of the switch (its processes live on) or back in."""
        _ip("link", "set", f"port{host}", "up" if up else "down", ns=self.switch)

    def throttle(self, host: int, rate: str | None) -> None:
        """Make host ``host``'s cable slow both ways, or fast again (see :func:`throttle`)."""
        throttle(self.switch, self.names[host], host, rate)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:  # the whole group: dask worker's nanny and the worker it spawned
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        for name in [*self.names, self.switch]:
            _ip("netns", "del", name, check=False)
