"""Adaptive scaling with local worker processes: an empty cluster grows with a burst of tasks, then shrinks."""

from __future__ import annotations

import logging
import time

import pytest

from scaler import Client
from scaler.adapters import AdaptiveScaler, LocalProcessAdapter
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot

pytestmark = pytest.mark.timeout(180)


def slow_square(value: int) -> int:
    time.sleep(0.3)
    return value * value


def test_workers_come_with_a_burst_and_go_after_the_idle_time(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scaler.adapters")
    with SchedulerProcess(str(tmp_path)) as scheduler, MonitorSubscriber(scheduler.monitor_address) as monitor:
        adapter = LocalProcessAdapter(WorkerConfig(address=scheduler.address, logging_level="WARNING"))
        with AdaptiveScaler(
            adapter, scheduler.monitor_address, minimum_workers=0, maximum_workers=2, idle_seconds=2.0,
            poll_seconds=0.5,
        ):
            wait_for_snapshot(monitor, lambda s: not s.workers, 30, "an empty cluster")
            with Client(address=scheduler.address, timeout_seconds=60) as client:
                futures = [client.submit(slow_square, value) for value in range(12)]
                grown = wait_for_snapshot(monitor, lambda s: len(s.workers) == 2, 60, "two workers")
                assert [future.result(timeout=120) for future in futures] == [value * value for value in range(12)]
            names = {worker.name for worker in grown.workers}
            wait_for_snapshot(monitor, lambda s: not s.workers, 60, "every worker released after the idle time")
    started = [r.getMessage() for r in caplog.records if "AdaptiveScaler: started" in r.getMessage()]
    stopped = [r.getMessage() for r in caplog.records if "AdaptiveScaler: stopping" in r.getMessage()]
    assert started and stopped, caplog.text
    assert all(name.rsplit("|", 1)[0] in " ".join(stopped) for name in names)
