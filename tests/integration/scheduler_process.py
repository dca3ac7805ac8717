"""A real `scaler_scheduler` with no workers, for the tests of what brings workers to it (adapters, scaling)."""

from __future__ import annotations

import os
import time
from typing import Callable

from scaler.cluster.combo import free_local_address
from scaler.scheduler.monitor import MonitorSnapshot
from scaler.ui.feed import MonitorSubscriber
from tests.conftest import child_python_environment, console_script
from tests.integration.spawned import Spawned

STARTUP_SECONDS = 30.0
# The tests wait on the feed for what they check: a snapshot every 0.25 s (the scheduler's tick), not every second.
MONITOR_INTERVAL = ("--monitor-interval-seconds", "0.25")


class SchedulerProcess(Spawned):
    """`scaler_scheduler ADDRESS --monitor-address ipc://<directory>/monitor --monitor-interval-seconds 0.25`,
    logging to <directory>/scheduler.log."""

    def __init__(self, directory: str, *options: str) -> None:
        self.address = free_local_address()
        self.monitor_address = f"ipc://{os.path.join(directory, 'monitor')}"
        environment = child_python_environment()
        environment.pop("SCALER_EXIT_WITH_PARENT", None)
        super().__init__(
            [
                console_script("scaler_scheduler"), self.address, "--monitor-address", self.monitor_address,
                *MONITOR_INTERVAL, *options,
            ],
            os.path.join(directory, "scheduler.log"), environment,
        )
        try:
            self.wait_for_log(f"listening on {self.address}", STARTUP_SECONDS)
        except BaseException:
            self.stop()
            raise

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
