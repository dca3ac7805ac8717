"""A real `scaler_scheduler` with no workers, for the tests of what brings workers to it (adapters, scaling)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable

from scaler.cluster.combo import free_local_address
from scaler.scheduler.monitor import MonitorSnapshot
from scaler.ui.feed import MonitorSubscriber
from tests.conftest import child_python_environment, console_script

STARTUP_SECONDS = 30.0


class SchedulerProcess:
    """`scaler_scheduler ADDRESS --monitor-address ipc://<directory>/monitor`, logging to <directory>/scheduler.log."""

    def __init__(self, directory: str, *options: str) -> None:
        self.address = free_local_address()
        self.monitor_address = f"ipc://{os.path.join(directory, 'monitor')}"
        self.log_path = os.path.join(directory, "scheduler.log")
        environment = child_python_environment()
        environment.pop("SCALER_EXIT_WITH_PARENT", None)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [console_script("scaler_scheduler"), self.address, "--monitor-address", self.monitor_address,
                 *options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
            )
        try:
            self.wait_for_log(f"listening on {self.address}")
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return log.read()

    def wait_for_log(self, needle: str, timeout: float = STARTUP_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.log():
            if self.process.poll() is not None:
                raise AssertionError(f"scheduler exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not logged within {timeout:g}s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> SchedulerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def wait_for_snapshot(
    monitor: MonitorSubscriber, condition: Callable[[MonitorSnapshot], bool], timeout: float, what: str
) -> MonitorSnapshot:
    """The first snapshot that meets `condition`; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        snapshot = monitor.receive(1.0)
        if snapshot is None:
            continue
        last = snapshot
        if condition(snapshot):
            return snapshot
    workers = None if last is None else [(w.name, w.assigned) for w in last.workers]
    raise AssertionError(f"not seen within {timeout:g}s: {what}; last snapshot's workers: {workers}")
