"""Starting a store process and knowing when it listens: what a Cluster (and the tests) call.

The store reports over the readiness pipe once it listens, with its addresses and host key; a store
that cannot start reports why, and one that dies first closes the pipe, so a failed start is known at
once, not at the timeout. The store exits when the process that started it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from scaler.store.server_config import StoreStartError
from scaler.store.store_address import StoreAddress
from scaler.utility.malloc_tuning import with_large_pages
from scaler.utility.parent_watch import EXIT_WITH_PARENT_ENV
from scaler.utility.readiness import FAILED, LISTENING, ReadinessPipe


class StoreProcess:
    """A running store process that this process started, and how to reach it."""

    def __init__(self, process: subprocess.Popen, address: StoreAddress) -> None:
        self.process = process
        self.address = address

    @property
    def pid(self) -> int:
        return self.process.pid

    @staticmethod
    def start(
        capacity_bytes: int | None = None, data_address: str | None = None, spill_directory: str | None = None,
        host_key: str | None = None, pool_idle_seconds: float | None = None, logging_level: str = "WARNING",
        environment: dict[str, str] | None = None, timeout_seconds: float = 30.0,
        scheduler_address: str | None = None, name: str | None = None,
        heartbeat_interval_seconds: float | None = None, death_timeout_seconds: float | None = None,
        curve_server_key: str | None = None, curve_secret_key: str | None = None,
        logging_paths: tuple[str, ...] = (), borrowing: bool = True,
    ) -> StoreProcess:
        """Start `python -m scaler.cli.store` and return once it listens; StoreStartError (nothing left running) if not.

        With a scheduler address it registers there as a store (PROTOCOL.md §17); listening comes first, so
        its registration may follow the return.
        """
        arguments = ["--logging-level", logging_level]
        for flag, value in (
            ("--capacity-bytes", capacity_bytes), ("--data-address", data_address),
            ("--spill-directory", spill_directory), ("--host-key", host_key),
            ("--pool-idle-seconds", pool_idle_seconds), ("--scheduler-address", scheduler_address),
            ("--name", name), ("--heartbeat-interval-seconds", heartbeat_interval_seconds),
            ("--death-timeout-seconds", death_timeout_seconds), ("--curve-server-key", curve_server_key),
            ("--curve-secret-key", curve_secret_key),
        ):
            if value is not None:
                arguments += [flag, str(value)]
        if not borrowing:
            arguments.append("--no-borrowing")
        if logging_paths:
            arguments += ["--logging-paths", *logging_paths]  # last: it takes every word that follows
        pipe = ReadinessPipe()
        child_environment = with_large_pages(environment if environment is not None else os.environ)  # fetched frames
        child_environment[EXIT_WITH_PARENT_ENV] = str(os.getpid())
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "scaler.cli.store", *arguments], env=pipe.child_environment(child_environment),
                stdin=subprocess.DEVNULL, pass_fds=pipe.pass_fds,
            )
            pipe.children_started()
            try:
                detail = _wait_until_listening(pipe, process, timeout_seconds)
            except BaseException:
                process.kill()
                process.wait()
                raise
        finally:
            pipe.close()
        return StoreProcess(process, StoreAddress.from_listening_report(detail))

    def stop(self, timeout_seconds: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the timeout; returns its exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait()

    def __enter__(self) -> StoreProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _wait_until_listening(pipe: ReadinessPipe, process: subprocess.Popen, timeout_seconds: float) -> str:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        for report in pipe.read(min(0.2, max(0.0, deadline - time.monotonic()))):
            if report.state == LISTENING:
                return report.detail
            if report.state == FAILED:
                raise StoreStartError(report.detail)
        if pipe.closed_by_all or process.poll() is not None:
            raise StoreStartError(f"the store exited before it listened (status {process.wait()})")
    raise StoreStartError(f"the store did not listen within {timeout_seconds:g}s")
