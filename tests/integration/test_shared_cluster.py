"""A cluster shared by two clients: the second one's task does not wait for the first one's backlog."""

from __future__ import annotations

import time

import pytest

from scaler import Client, SchedulerClusterCombo

pytestmark = pytest.mark.timeout(120)

FLOOD_TASKS = 600
FLOOD_TASK_SECONDS = 0.01


def sleep_and_return(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def test_a_second_clients_task_runs_before_the_first_clients_backlog_drains() -> None:
    # Each worker holds at most 2 tasks, so that this checks only the scheduler's fair share: how deep a
    # worker's own queue is (and so how many of the flood's tasks a newcomer's task waits behind on the
    # worker) is another matter (issue 25, point 2).
    with SchedulerClusterCombo(n_workers=2, per_worker_queue_size=2, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as flood, Client(address=cluster.get_address()) as small:
            # 600 tasks of 10 ms on 2 workers: 3 s of backlog, more on a loaded machine.
            backlog = [flood.submit(sleep_and_return, FLOOD_TASK_SECONDS, index) for index in range(FLOOD_TASKS)]
            assert backlog[0].result(timeout=60) == 0  # the backlog is in the scheduler and running

            started = time.monotonic()
            assert small.submit(sleep_and_return, 0, 7).result(timeout=60) == 7
            waited = time.monotonic() - started

            flood_done = sum(future.done() for future in backlog)
            # First come, first served, it would have waited for all 600: a generous bound, never a tight time.
            assert flood_done < FLOOD_TASKS * 0.8, f"the small client's task waited for {flood_done} of the flood's"
            assert waited < 3.0, f"the small client's task waited {waited:.2f} s"
            flood.clear()


def test_a_second_clients_tasks_run_ahead_of_what_the_first_client_queued_on_the_workers() -> None:
    # Workers filled to their capacity (prefetch off: what no-op tasks get anyway), 1,000 of the flood's tasks on
    # each: the fair share gives the small client's tasks the next free slots, and the workers run them before
    # what they hold (TaskGroup.ahead). Behind those queues, its map would finish after about 2,000 of the flood's.
    with SchedulerClusterCombo(n_workers=2, worker_queue_seconds=0, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as flood, Client(address=cluster.get_address()) as small:
            backlog = [flood.submit(sleep_and_return, 0.002, index) for index in range(3000)]
            assert backlog[0].result(timeout=60) == 0
            assert small.map(sleep_and_return, [(0, index) for index in range(20)]) == list(range(20))
            flood_done = sum(future.done() for future in backlog)
            assert flood_done < 1000, f"the small client's tasks waited for {flood_done} of the flood's"
            flood.clear()
