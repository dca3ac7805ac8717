"""The implementations under test and their processes: which worker (or scheduler) to start, and how.

The suite starts a worker as `COMMAND ADDRESS --worker-name N --per-worker-task-queue-size C
--heartbeat-interval S --death-timeout-seconds S` (the option names of scaler_cluster); README.md says
how to point it at another implementation.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable

from tests.conftest import child_python_environment
from tests.native_worker import native_worker_executable, native_worker_skipped

WORKER_ENV = "SCALER_PROTOCOL_WORKER"
WORKER_PAYLOADS_ENV = "SCALER_PROTOCOL_WORKER_PAYLOADS"
SCHEDULER_ENV = "SCALER_PROTOCOL_SCHEDULER"
STOP_GRACE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class WorkerImplementation:
    name: str
    dialect: str  # "python" or "neutral": how its tasks' payloads look (dialects.py)
    command: Callable[[], list[str]]  # resolved when first started (the native worker may need a build)


# The implementations of this repository (the others come from SCALER_PROTOCOL_WORKER / SCALER_PROTOCOL_SCHEDULER).
OWN_IMPLEMENTATIONS = ("python", "native")


def worker_implementations() -> list[WorkerImplementation]:
    """SCALER_PROTOCOL_WORKER alone if it is set; otherwise the Python worker and the native worker."""
    external = os.environ.get(WORKER_ENV)
    if external:
        dialect = os.environ.get(WORKER_PAYLOADS_ENV, "neutral")
        return [WorkerImplementation("external", dialect, lambda: shlex.split(external))]
    found = [WorkerImplementation("python", "python", lambda: [sys.executable, "-m", "tests.protocol.python_worker"])]
    if not native_worker_skipped():
        found.append(
            WorkerImplementation("native", "neutral", lambda: [native_worker_executable(), "--exit-with-parent"])
        )
    return found


def scheduler_is_own() -> bool:
    return not os.environ.get(SCHEDULER_ENV)


def scheduler_command() -> list[str]:
    external = os.environ.get(SCHEDULER_ENV)
    return shlex.split(external) if external else [sys.executable, "-m", "scaler.cli.scheduler"]


class PeerProcess:
    """One peer process under test, its output in a log file that failures quote."""

    def __init__(self, command: list[str], log_path: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=child_python_environment(),
        )

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path, errors="replace") as log:
            return log.read()

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the peer did not exit within {timeout:g}s; its log:\n{self.log()}") from None

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def start_worker(
    implementation: WorkerImplementation,
    address: str,
    log_path: str,
    name: str = "conformance",
    capacity: int = 1000,
    heartbeat_interval: float = 2.0,
    death_timeout: float = 300.0,
    tags: str | None = None,
) -> PeerProcess:
    command = implementation.command() + [
        address, "--worker-name", name, "--per-worker-task-queue-size", str(capacity),
        "--heartbeat-interval", f"{heartbeat_interval:g}", "--death-timeout-seconds", f"{death_timeout:g}",
    ]
    if tags is not None:
        command += ["--tags", tags]
    return PeerProcess(command, log_path)


def start_scheduler(address: str, log_path: str, *options: str) -> PeerProcess:
    return PeerProcess([*scheduler_command(), address, *options], log_path)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.05)
