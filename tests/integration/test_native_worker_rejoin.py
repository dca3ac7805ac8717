"""Native workers (native/worker/) outlive a scheduler killed with SIGKILL and serve the same command started
again on the same address (issue 26, PROTOCOL.md §21), as the Python workers do: the same processes before and
after, every future completes once with its own result, and no task whose result a worker held runs again
(each native worker logs every run at DEBUG: "running task ID", the side channel counted here).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import time

import pytest

from scaler import Client
from scaler.client.future import ScalerFuture
from scaler.cluster.combo import free_local_address
from scaler.native_tasks import NeutralSerializer, native
from tests.integration.spawned import Spawned, Spawner, start_scheduler
from tests.integration.test_scheduler_restart_clients import CompletionCount
from tests.integration.waiting import wait_until
from tests.native_worker import BUILD_TIMEOUT_SECONDS, native_worker_executable

pytestmark = pytest.mark.timeout(180 + BUILD_TIMEOUT_SECONDS)

RESULT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation
SCHEDULER_OPTIONS = ("--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "5", "--logging-level", "INFO")
SHORT_TASKS = 120
# Long enough to still run, usually, when the next scheduler answers (2 s after the kill, plus its start).
LONG_MS = 6000
RAN = re.compile(r"running task (\d+)")


def start_native_workers(spawn: Spawner, address: str) -> list[Spawned]:
    executable = native_worker_executable()
    workers = [
        spawn(name, [
            executable, address, "--worker-name", name, "--threads", "2", "--heartbeat-interval", "0.5",
            "--death-timeout-seconds", "60", "--logging-level", "DEBUG",
        ])
        for name in ("native-1", "native-2")
    ]
    for worker in workers:  # both the scheduler's before it dies: a worker still joining would only join the next
        worker.wait_for_log("connected to the scheduler", timeout=RESULT_SECONDS)
    return workers


def runs(workers: list[Spawned]) -> collections.Counter[int]:
    return collections.Counter(int(task_id) for worker in workers for task_id in RAN.findall(worker.log()))


def long_and_short_tasks(
    client: Client, workers: list[Spawned], long_ms: int, short_tasks: int, short_ms: int, timeout: float
) -> tuple[list[ScalerFuture], list[ScalerFuture], list[float], CompletionCount]:
    """Two long native sleeps (`long_ms`, `long_ms + 1`) running, then `short_tasks` short ones of distinct durations
    (sleep_ms returns its argument) of which an eighth are done: the long ones, the short ones, their durations, and
    the count of each future's completions."""
    long_futures = [client.submit(native("sleep_ms"), long_ms + index) for index in range(2)]
    wait_until(lambda: len(runs(workers)) == 2, "the long tasks started", timeout=timeout)
    durations = [short_ms + index / 1000 for index in range(short_tasks)]
    futures = [client.submit(native("sleep_ms"), duration) for duration in durations]
    completions = CompletionCount([*futures, *long_futures])
    wait_until(lambda: sum(future.done() for future in futures) >= short_tasks // 8, "some short tasks done",
               timeout=timeout)
    return long_futures, futures, durations, completions


def test_native_workers_outlive_a_sigkilled_scheduler_and_nothing_held_runs_again(spawn: Spawner) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address, *SCHEDULER_OPTIONS)
    workers = start_native_workers(spawn, address)
    pids = [worker.pid for worker in workers]
    with Client(
        address=address, serializer=NeutralSerializer(), timeout_seconds=30, heartbeat_interval_seconds=0.5
    ) as client:
        # One thread of the two runs a long task through the restart, the other short ones, some during the outage.
        long_futures, futures, durations, completions = long_and_short_tasks(
            client, workers, LONG_MS, SHORT_TASKS, 30, RESULT_SECONDS
        )
        done_before = sum(future.done() for future in futures)
        assert done_before < SHORT_TASKS and not any(future.done() for future in long_futures)

        os.kill(scheduler.pid, signal.SIGKILL)
        scheduler.wait_exit()
        time.sleep(2.0)  # the operator starts the same command again, a little later
        scheduler = start_scheduler(spawn, address, *SCHEDULER_OPTIONS, name="scheduler-again")

        assert [future.result(timeout=RESULT_SECONDS) for future in futures] == durations
        assert [future.result(timeout=RESULT_SECONDS) for future in long_futures] == [LONG_MS, LONG_MS + 1]
        # The same workers serve new work under the new scheduler.
        assert client.map(native("mul"), [(value, value) for value in range(10)]) == [v * v for v in range(10)]
    assert sorted(completions.counts.values()) == [1] * (SHORT_TASKS + 2), "a future completed more than once"

    logs = "".join(worker.log() for worker in workers)
    reannounced = sum(int(count) for count in re.findall(r"re-announced (\d+) tasks held", logs))
    held = sum(int(count) for count in re.findall(r"sent (\d+) messages held before", logs))
    ran_again = sorted(task_id for task_id, count in runs(workers).items() if count > 1)
    print(f"{done_before} of {SHORT_TASKS} short tasks done before the kill; re-announced {reannounced} tasks, "
          f"{held} results messages held; ran again: {ran_again}")
    assert logs.count("welcomed again") == 2, "both workers rejoined"
    # The long tasks are re-announced, or (on a machine so loaded that the restart outlasts them) held as results;
    # either way they must not run again. Each path alone is pinned down in tests/protocol/test_worker_rejoin.py.
    assert reannounced + held > 0, "the workers held nothing when the scheduler died: nothing was proven"
    assert ran_again == [], "tasks whose result a worker held (or that it still ran) ran again"
    assert "refused us" not in logs
    assert [worker.pid for worker in workers] == pids and all(worker.process.poll() is None for worker in workers)
    assert "resumed with id prefix" in scheduler.log()
