"""Every task a client submits is counted in the monitor feed (PROTOCOL.md §12), also those that end without an
outcome because their client left: a real scheduler with no worker, a real client, the real feed."""

from __future__ import annotations

import pytest

from scaler import Client
from scaler.ui.feed import MonitorSubscriber
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot

pytestmark = pytest.mark.timeout(120)

TASKS = 1000
WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure


def test_tasks_of_a_client_that_leaves_before_they_run_are_counted_as_dropped(tmp_path) -> None:
    with SchedulerProcess(str(tmp_path)) as scheduler, MonitorSubscriber(scheduler.monitor_address) as monitor:
        with Client(address=scheduler.address, timeout_seconds=30) as client:
            futures = [client.submit(abs, -index) for index in range(TASKS)]
            wait_for_snapshot(monitor, lambda s: s.tasks.unassigned == TASKS, WAIT_SECONDS, "all tasks queued")
            assert not any(future.done() for future in futures)
        tasks = wait_for_snapshot(monitor, lambda s: not s.clients, WAIT_SECONDS, "the client left").tasks
        ended = tasks.success + tasks.failed + tasks.canceled + tasks.not_found + tasks.dropped
        held = tasks.unassigned + tasks.running + tasks.waiting_on_dependencies
        assert (held, ended, tasks.dropped) == (0, TASKS, TASKS)
