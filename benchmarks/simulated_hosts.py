"""Simulated hosts for benchmarks/scale.py: network namespaces on one bridge, and processes started inside them.

    switch namespace (a bridge)
      |-- the scheduler's namespace   SUBNET.1
      |-- host 0 .. host H-1          SUBNET.11 ..
      `-- the root namespace          SUBNET.254  (the clients, the monitor)

Processes are started straight into a namespace (setns(2) between fork and exec), not through
`ip netns exec`, so that hundreds of workers start at once and each pid is the worker's own: the
benchmark kills exactly the workers it means to. Everything needs root and ip(8).

Every namespace, veth and process made here is removed by `close()`, which the benchmark calls in a
`finally` whatever ended it (an exception, Ctrl-C, or the SIGTERM `Termination` turns into one).
Names carry a random tag, so runs never clash.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import signal
import subprocess
import time
from typing import IO, Any, Iterator

_PREFIX = "scsc"
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done


class SimulatedHosts:
    """A scheduler namespace and `host_count` host namespaces on one bridge, with the root namespace on it too."""

    def __init__(self, host_count: int) -> None:
        self.tag = secrets.token_hex(2)
        used = set(re.findall(r"10\.216\.(\d+)\.", ip("-4", "route", "show", "table", "all").stdout))
        self.subnet = f"10.216.{next(x for x in range(1, 255) if str(x) not in used)}"
        self.host_count = host_count
        self.namespaces: list[str] = []
        self._root_link = ""
        self._processes: list[subprocess.Popen] = []

    def netns(self, role: str) -> str:
        return f"{_PREFIX}-{self.tag}-{role}"

    def host_role(self, index: int) -> str:
        return f"h{index}"

    def address(self, role: str) -> str:
        if role == "s":
            return f"{self.subnet}.1"
        return f"{self.subnet}.{11 + int(role[1:])}"

    def build(self) -> None:
        switch = self._add("sw")
        ip("link", "add", "br0", "type", "bridge", netns=switch)
        ip("link", "set", "br0", "up", netns=switch)
        roles = [("s", 1), *((self.host_role(i), 11 + i) for i in range(self.host_count)), ("root", 254)]
        for role, host_number in roles:
            netns = None if role == "root" else self._add(role)
            outside = f"{_PREFIX}{self.tag}{role}"
            ip("link", "add", outside, *(["netns", netns] if netns else []),
               "type", "veth", "peer", "name", f"{outside}p", "netns", switch)
            if netns is None:
                self._root_link = outside
            ip("link", "set", f"{outside}p", "master", "br0", netns=switch)
            ip("link", "set", f"{outside}p", "up", netns=switch)
            ip("addr", "add", f"{self.subnet}.{host_number}/24", "dev", outside, netns=netns)
            ip("link", "set", outside, "up", netns=netns)

    def _add(self, role: str) -> str:
        name = self.netns(role)
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("link", "set", "lo", "up", netns=name)
        return name

    def spawn(self, role: str, command: list[str], log: IO[Any] | int, stdin: int = subprocess.DEVNULL,
              stdout: IO[Any] | int | None = None) -> subprocess.Popen:
        """`command` inside the namespace of `role` ("root" for the root namespace), in a session of its own; its
        pipes unbuffered, so that a select() on one sees every line that has not been read."""
        namespace_fd = -1 if role == "root" else os.open(f"/var/run/netns/{self.netns(role)}", os.O_RDONLY)

        def enter() -> None:
            if namespace_fd >= 0 and _LIBC.setns(namespace_fd, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the host's network namespace failed")

        try:
            process = subprocess.Popen(
                command, stdin=stdin, stdout=log if stdout is None else stdout, stderr=log,
                start_new_session=True, preexec_fn=enter, bufsize=0,
            )
        finally:
            if namespace_fd >= 0:
                os.close(namespace_fd)
        self._processes.append(process)
        return process

    def stop_processes(self, processes: list[subprocess.Popen], seconds: float = 15.0) -> None:
        """SIGTERM to each one's process group, then SIGKILL to whatever is left after `seconds`."""
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + seconds
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for process in processes:
            if process in self._processes:
                self._processes.remove(process)

    def close(self) -> None:
        """Every process started here, anything else still in the namespaces, the namespaces and the root veth."""
        self.stop_processes(list(reversed(self._processes)), seconds=10.0)
        for netns in self.namespaces:
            for pid in ip("netns", "pids", netns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", netns, check=False)
        self.namespaces.clear()
        if self._root_link:
            ip("link", "del", self._root_link, check=False)
            self._root_link = ""


class Termination:
    """A SIGTERM unwinds like Ctrl-C, so that the `finally` that removes the namespaces runs; one that arrives
    while they are being removed waits for the removal to finish."""

    def __init__(self) -> None:
        self.signal_number = 0
        self.deferring = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handle)

    def handle(self, number: int, _frame: Any) -> None:
        self.signal_number = number
        if not self.deferring:
            raise SystemExit(128 + number)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.signal_number:
            raise SystemExit(128 + self.signal_number)
