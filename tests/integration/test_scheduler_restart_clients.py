"""Clients across a scheduler killed with SIGKILL and started again, the same command on the same address
(issue 26): every future completes, with the right value, exactly once; a client started while the scheduler
is down waits and then works. Real processes: `scaler_scheduler` and `scaler_cluster -n 2`, whose workers
outlive the scheduler and serve the next one: the same worker processes before and after, and no task whose
result a worker held runs again (each run appends the task's value to a file, the side channel counted here).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import signal
import threading
import time

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from tests.conftest import console_script
from tests.integration.spawned import Spawned, Spawner, start_scheduler
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TASKS = 400
RESULT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation
SCHEDULER_OPTIONS = ("--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "5", "--logging-level", "INFO")


def logged_task(value: int, blob: bytes, log_path: str) -> int:
    """One short write per run (O_APPEND: lines never interleave), to count how often each task ran."""
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{value}\n".encode())
    finally:
        os.close(descriptor)
    time.sleep(0.02)
    return value * 3 + len(blob)


def slow_add(*values: int) -> int:
    time.sleep(0.4)
    return sum(values)


def start_workers(spawn: Spawner, address: str, name: str) -> Spawned:
    workers = spawn(name, [
        console_script("scaler_cluster"), "-n", "2", "--heartbeat-interval", "0.5", "--death-timeout-seconds", "60",
        "--logging-level", "INFO", address,
    ])
    # Both agents welcomed, so that both are the scheduler's before it dies (they rejoin; a worker that never
    # joined would only join the next one).
    wait_until(lambda: workers.log().count("connected to the scheduler") >= 2, "both workers joined", timeout=60)
    return workers


def worker_agents(workers: Spawned) -> set[int]:
    return {child.pid for child in workers.descendants() if "scaler.worker.agent" in " ".join(child.cmdline())}


def kill_and_restart(spawn: Spawner, scheduler: Spawned, address: str) -> Spawned:
    os.kill(scheduler.pid, signal.SIGKILL)
    scheduler.wait_exit()
    time.sleep(2.0)
    return start_scheduler(spawn, address, *SCHEDULER_OPTIONS, name="scheduler-again")


class CompletionCount:
    """How often each future completed: a done-callback runs once per completion."""

    def __init__(self, futures: list[concurrent.futures.Future]) -> None:
        self.counts: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()
        for index, future in enumerate(futures):
            future.add_done_callback(lambda _, index=index: self._done(index))

    def _done(self, index: int) -> None:
        with self._lock:
            self.counts[index] += 1


def test_a_client_outlives_a_scheduler_restart_with_tasks_an_object_and_a_graph_in_flight(
    spawn: Spawner, tmp_path,
) -> None:
    address = free_local_address()
    log_path = str(tmp_path / "runs.log")
    scheduler = start_scheduler(spawn, address, *SCHEDULER_OPTIONS)
    workers = start_workers(spawn, address, "workers")
    agents = worker_agents(workers)
    assert len(agents) == 2
    with Client(address=address, timeout_seconds=30, heartbeat_interval_seconds=0.5) as client:
        blob = client.send_object(b"x" * 1000, name="blob")
        futures = [client.submit(logged_task, value, blob, log_path) for value in range(TASKS)]
        completions = CompletionCount(futures)
        graph = {"a": (slow_add, 1, 2), "b": (slow_add, "a", 10), "c": (slow_add, "a", "b")}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            graph_result = pool.submit(client.get, graph, ["c", "b"])
            deadline = time.monotonic() + RESULT_SECONDS
            while sum(future.done() for future in futures) < TASKS // 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            done_before = sum(future.done() for future in futures)
            assert 0 < done_before < TASKS, "the kill must come with tasks both finished and in flight"
            assert not graph_result.done(), "the kill must come with the graph in flight"

            killed_at = time.monotonic()
            scheduler = kill_and_restart(spawn, scheduler, address)
            listening_at = time.monotonic()

            results = [future.result(timeout=RESULT_SECONDS) for future in futures]
            assert results == [value * 3 + 1000 for value in range(TASKS)]
            assert graph_result.result(timeout=RESULT_SECONDS) == {"c": 16, "b": 13}
            finished_at = time.monotonic()
        assert sorted(completions.counts.values()) == [1] * TASKS, "a future completed more than once"
        # The object is still there, under its id, for new tasks: the client sent it again.
        assert client.submit(logged_task, -1, blob, log_path).result(timeout=RESULT_SECONDS) == -3 + 1000
    with open(log_path) as log:
        runs = collections.Counter(line.strip() for line in log)
    ran_again = sorted(value for value in range(TASKS) if runs[str(value)] > 1)
    print(f"{done_before} of {TASKS} done before the kill; ran again: {ran_again}; new scheduler listening "
          f"{listening_at - killed_at:.1f}s after the kill, all done {finished_at - listening_at:.1f}s later")
    assert all(runs[str(value)] >= 1 for value in range(TASKS))
    assert "resumed with id prefix" in scheduler.log()
    assert "refused us" not in workers.log()
    assert worker_agents(workers) == agents, "the same worker processes, none replaced"
    assert ran_again == [], "tasks whose result a worker held ran again"


def test_a_client_started_while_the_scheduler_is_down_waits_and_then_works(spawn: Spawner) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address, *SCHEDULER_OPTIONS)
    workers = start_workers(spawn, address, "workers")
    agents = worker_agents(workers)
    os.kill(scheduler.pid, signal.SIGKILL)
    scheduler.wait_exit()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        connecting = pool.submit(Client, address=address, timeout_seconds=30, heartbeat_interval_seconds=0.5)
        time.sleep(2.0)
        assert not connecting.done()
        start_scheduler(spawn, address, *SCHEDULER_OPTIONS, name="scheduler-again")
        with connecting.result(timeout=RESULT_SECONDS) as client:
            assert client.map(slow_add, [(value, 1) for value in range(4)]) == [1, 2, 3, 4]
    # Served by the workers of the scheduler before, which waited for it as the client did.
    assert worker_agents(workers) == agents and "welcomed again" in workers.log()
