"""Console scripts started by the tests as a user starts them, each logging to a file the test can read."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import time
from typing import Callable

import psutil

from scaler.utility.process_stop import stop_process
from tests.conftest import console_script

# Upper bounds against hangs on a loaded machine, never expectations.
WAIT_SECONDS = 60.0
STOP_GRACE_SECONDS = 15.0


class Spawned:
    """A child process whose stdout and stderr go to a log file we can poll."""

    def __init__(self, args: list[str], log_path: str, env: dict[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as out:
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env)
        self.pid = self.process.pid

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return log.read()

    def wait_for_log(self, needle: str, timeout: float = WAIT_SECONDS) -> str:
        deadline = time.monotonic() + timeout
        while needle not in (text := self.log()):
            if self.process.poll() is not None:
                raise AssertionError(f"exited with {self.process.returncode} before logging {needle!r}:\n{text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not logged within {timeout:g}s:\n{text}{self.stacks()}")
            time.sleep(0.05)
        return text

    def wait_exit(self, timeout: float = WAIT_SECONDS) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"pid {self.pid} still running after {timeout:g}s:\n{self.log()}{self.stacks()}"
            ) from None

    def stacks(self) -> str:
        """Where this process and its descendants are, for the message of a wait that timed out: py-spy's dump
        of each (the dev extra installs it; it reads another process's memory, so it may be refused)."""
        py_spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("py-spy")
        if py_spy is None:
            return "\n(no py-spy to show where the processes are)"
        dumps = []
        for pid in [self.pid, *(child.pid for child in self.descendants())]:
            try:
                done = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
                dumps.append(f"--- py-spy dump --pid {pid}\n{done.stdout}{done.stderr}")
            except subprocess.TimeoutExpired:
                dumps.append(f"--- py-spy dump --pid {pid}: no answer within 20 s")
        return "\n" + "\n".join(dumps)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> int:
        """Terminate (then kill) the process and anything it left behind; its exit code. Safe to call twice."""
        stop_process(self.process, grace_seconds)
        return self.process.returncode


# spawn(name, args): starts a process logging to NAME.log; the `spawn` fixture stops them all at the end.
Spawner = Callable[[str, list[str]], Spawned]


def start_scheduler(spawn: Spawner, address: str, *options: str, name: str = "scheduler") -> Spawned:
    """`scaler_scheduler [options] ADDRESS`, once it listens."""
    scheduler = spawn(name, [console_script("scaler_scheduler"), *options, address])
    scheduler.wait_for_log(f"listening on {address}")
    return scheduler
