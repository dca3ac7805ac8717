"""A scheduler process and worker processes of both kinds (Python, native), each started as a user would
from the command line; every one is stopped and reaped by `stop()`, which prints their logs."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import child_python_environment, console_script
from tests.protocol.conftest import free_tcp_address

STOP_SECONDS = 10.0


class ProcessCluster:
    def __init__(self, native_executable: str, log_dir: str, *scheduler_options: str) -> None:
        self.address = free_tcp_address()
        self._native_executable = native_executable
        self._log_dir = log_dir
        self.processes: list[subprocess.Popen] = []
        # Dead workers are noticed within seconds, so a killed one's tasks move on quickly.
        self.scheduler = self._start("scheduler", [
            sys.executable, "-m", "scaler.cli.scheduler", self.address, "--worker-timeout-seconds", "2",
            "--heartbeat-interval-seconds", "0.5", "--logging-level", "INFO", *scheduler_options,
        ])

    def add_worker(self, name: str, *options: str) -> subprocess.Popen:
        """A native worker (native/worker/)."""
        return self._start(name, [
            self._native_executable, self.address, "--worker-name", name, "--exit-with-parent", *options,
        ])

    def add_python_worker(self, name: str, *options: str) -> subprocess.Popen:
        """One Python worker, through scaler_cluster."""
        return self._start(name, [
            console_script("scaler_cluster"), "-n", "1", "--worker-names", name, "--logging-level", "INFO",
            self.address, *options,
        ])

    def add_store(self, name: str) -> subprocess.Popen:
        """An object store registered with the scheduler (python -m scaler.cli.store)."""
        return self._start(name, [
            sys.executable, "-m", "scaler.cli.store", "--scheduler-address", self.address, "--name", name,
            "--capacity-bytes", str(64 << 20), "--logging-level", "INFO",
        ])

    def log_of(self, name: str) -> str:
        with open(os.path.join(self._log_dir, f"{name}.log"), errors="replace") as log:
            return log.read()

    def _start(self, name: str, command: list[str]) -> subprocess.Popen:
        with open(os.path.join(self._log_dir, f"{name}.log"), "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=child_python_environment())
        self.processes.append(process)
        return process

    def stop(self) -> None:
        # Workers first, the scheduler last: workers that outlive it would wait for it until they give up.
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name in sorted(os.listdir(self._log_dir)):
            if name.endswith(".log"):
                with open(os.path.join(self._log_dir, name), errors="replace") as log:
                    print(f"---- {name} ----\n{log.read()}")
