"""The monitor feed shows each client's queued and running tasks and how long its oldest ready task has
waited: a real cluster, two real clients (one with a backlog, one idle), the real feed.

scaler_top and scaler_ui show the same rows: test_top.py and test_ui.py drive them on this scene.
"""

from __future__ import annotations

import time

import pytest

from scaler.ui.feed import MonitorSubscriber
from tests.integration.client_backlog import BACKLOG, TwoClients, rows_by_name, shows_the_backlog
from tests.integration.scheduler_process import wait_for_snapshot

pytestmark = pytest.mark.timeout(120)

WAIT_SECONDS = 30.0  # an upper bound against hangs, never a measure


def test_the_feed_shows_each_clients_queued_and_running_tasks_and_the_oldest_wait_growing(tmp_path) -> None:
    with TwoClients(tmp_path) as scene, MonitorSubscriber(scene.monitor_address) as monitor:
        first = wait_for_snapshot(monitor, shows_the_backlog, WAIT_SECONDS, "the backlog on the feed")
        backlog, idle = rows_by_name(first)["backlog"], rows_by_name(first)["idle"]
        # All the tasks workers hold are the backlog's; the rest of it waits in the scheduler.
        assert backlog.running == sum(worker.assigned for worker in first.workers) >= 1
        assert backlog.queued == BACKLOG - backlog.running == first.tasks.unassigned > 0
        assert backlog.tasks == BACKLOG and backlog.share == 1.0
        # It cannot have waited longer than since the test submitted it (one machine, one monotonic clock).
        assert 0.0 <= backlog.oldest_ready_seconds <= time.monotonic() - scene.submitted_at
        assert (idle.queued, idle.running, idle.oldest_ready_seconds, idle.tasks, idle.share) == (0, 0, 0.0, 0, 1.0)

        later = wait_for_snapshot(
            monitor, lambda s: s.sequence > first.sequence + 1 and shows_the_backlog(s), WAIT_SECONDS, "a later one"
        )
        assert rows_by_name(later)["backlog"].oldest_ready_seconds > backlog.oldest_ready_seconds
        assert rows_by_name(later)["backlog"].queued == backlog.queued  # the gate holds the worker

        scene.open_gate()
        done = wait_for_snapshot(
            monitor, lambda s: rows_by_name(s).get("backlog") is not None and rows_by_name(s)["backlog"].tasks == 0,
            WAIT_SECONDS, "the backlog done",
        )
        finished = rows_by_name(done)["backlog"]
        assert (finished.queued, finished.running, finished.oldest_ready_seconds) == (0, 0, 0.0)
