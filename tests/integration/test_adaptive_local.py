"""Adaptive scaling with local worker processes: an empty cluster grows with a burst of tasks, then shrinks."""

from __future__ import annotations

import logging
import os
import time
from typing import Sequence

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
            poll_seconds=0.5, scheduler_address=scheduler.address,
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
    # Scale-down asked the scheduler to drain each worker first, and stopped it once drained.
    drained = " ".join(r.getMessage() for r in caplog.records if "AdaptiveScaler: draining" in r.getMessage())
    assert all(name in drained for name in names), caplog.text
    assert all("(drained)" in message for message in stopped), stopped


def record_start_then_square(directory: str, value: int) -> int:
    """Appends a line to its own file when it starts: a task killed mid-run and run again shows two."""
    with open(os.path.join(directory, str(value)), "a") as record:
        record.write("started\n")
    # Long enough for the feed (4 snapshots a second, tests/integration/scheduler_process.py) to show the worker
    # chosen for release holding several; each took 0.5 s while the feed came once a second.
    time.sleep(0.2)
    return value * value


def test_scale_down_drains_a_worker_holding_queued_tasks_and_loses_none(tmp_path, caplog) -> None:
    """The policy picks an idle worker; right then the scheduler hands it a queue of tasks (the hook makes
    that race certain). Drained, it gives the queue back, finishes what it runs, and only then is stopped."""
    caplog.set_level(logging.INFO, logger="scaler.adapters")
    records = tmp_path / "records"
    records.mkdir()
    futures: list = []
    held_when_drained: dict[str, int] = {}

    with SchedulerProcess(str(tmp_path)) as scheduler, MonitorSubscriber(scheduler.monitor_address) as monitor, \
            Client(address=scheduler.address, timeout_seconds=60) as client:

        def drain_with_work_just_sent(names: Sequence[str]) -> None:
            if not held_when_drained:  # the first scale-down only; later ones drain as usual
                futures.extend(client.submit(record_start_then_square, str(records), v) for v in range(20))
                with MonitorSubscriber(scheduler.monitor_address) as own_monitor:  # a socket per thread
                    loaded = wait_for_snapshot(
                        own_monitor, lambda s: any(w.name in names and w.assigned > 1 for w in s.workers), 30,
                        "the worker chosen for release holding queued tasks",
                    )
                held_when_drained.update({w.name: w.assigned for w in loaded.workers if w.name in names})
            result = client.drain_workers(list(names))
            assert set(result.draining) | set(result.unknown) == set(names)

        adapter = LocalProcessAdapter(WorkerConfig(address=scheduler.address, logging_level="WARNING"))
        with AdaptiveScaler(
            adapter, scheduler.monitor_address, minimum_workers=1, maximum_workers=2, idle_seconds=2.0,
            poll_seconds=0.5, drain_workers=drain_with_work_just_sent,
        ):
            burst = [client.submit(slow_square, value) for value in range(4)]
            wait_for_snapshot(monitor, lambda s: len(s.workers) == 2, 60, "two workers")
            assert [future.result(timeout=60) for future in burst] == [value * value for value in range(4)]
            deadline = time.monotonic() + 60
            while not held_when_drained and time.monotonic() < deadline:
                time.sleep(0.2)
            assert held_when_drained, "no worker was drained for release"
            assert [future.result(timeout=90) for future in futures] == [v * v for v in range(20)]
            (drained_name,) = held_when_drained
            wait_for_snapshot(
                monitor, lambda s: drained_name not in {w.name for w in s.workers}, 60, "the drained worker stopped"
            )

    assert held_when_drained[drained_name] > 1
    # No task was killed mid-run and run again: each started once.
    assert sorted(int(name) for name in os.listdir(records)) == list(range(20))
    assert all((records / name).read_text() == "started\n" for name in os.listdir(records))
    messages = [record.getMessage() for record in caplog.records]
    group = drained_name.rsplit("|", 1)[0]
    drained_at = next(i for i, text in enumerate(messages) if "draining worker(s)" in text and drained_name in text)
    stopped_at = next(i for i, text in enumerate(messages) if "stopping group(s)" in text and group in text)
    assert drained_at < stopped_at and "(drained)" in messages[stopped_at], messages
