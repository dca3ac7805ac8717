"""Per-task timeout, memory limit, force-cancel, and load balancing between a slow and a fast worker."""

from __future__ import annotations

import concurrent.futures
import os
import time

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import MemoryLimitError, TaskTimeoutError
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def sleep_and_return(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def hog_memory(megabytes: int) -> int:
    blocks = []
    for _ in range(megabytes // 16):
        blocks.append(bytearray(16 * 1024 * 1024))
        time.sleep(0.02)
    time.sleep(5)
    return len(blocks)


def worker_pid() -> int:
    return os.getpid()


def slow_on_one_worker(value: int, slow_pid: int) -> tuple[int, int]:
    time.sleep(0.5 if os.getppid() == slow_pid else 0.01)
    return value, os.getppid()


def test_a_task_past_the_timeout_fails_and_the_worker_carries_on() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR", task_timeout_seconds=1) as cluster:
        with Client(address=cluster.get_address()) as client:
            with pytest.raises(TaskTimeoutError, match="--task-timeout-seconds"):
                client.submit(time.sleep, 30).result(timeout=60)
            assert client.submit(sleep_and_return, 0.1, 7).result(timeout=60) == 7


def test_a_processor_over_the_memory_limit_fails_its_task_with_a_clear_error() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR", memory_limit_bytes=200 * 1024 * 1024) as cluster:
        with Client(address=cluster.get_address()) as client:
            with pytest.raises(MemoryLimitError, match="--memory-limit-bytes"):
                client.submit(hog_memory, 1024).result(timeout=60)
            assert client.submit(sleep_and_return, 0, 3).result(timeout=60) == 3


def mark_then_sleep(marker: str, seconds: float) -> None:
    """Says it is running (creates `marker`), then sleeps."""
    open(marker, "x").close()
    time.sleep(seconds)


def test_force_cancel_stops_a_running_task(client: Client, tmp_path) -> None:
    marker = str(tmp_path / "running")
    running = client.submit(mark_then_sleep, marker, 60)
    wait_until(lambda: os.path.exists(marker), "the task running", 60)
    started = time.monotonic()
    assert running.cancel(force=True) is True
    assert running.cancelled()
    assert time.monotonic() - started < 30
    with pytest.raises(concurrent.futures.CancelledError):
        running.result(timeout=5)
    assert client.submit(sleep_and_return, 0, 5).result(timeout=60) == 5


def test_clear_stops_running_tasks_too(client: Client, tmp_path) -> None:
    markers = [str(tmp_path / f"running-{index}") for index in range(2)]
    running = [client.submit(mark_then_sleep, marker, 60) for marker in markers]
    wait_until(lambda: all(os.path.exists(marker) for marker in markers), "both tasks running", 60)
    client.clear()
    assert all(f.cancelled() for f in running)
    assert client.submit(sleep_and_return, 0, 9).result(timeout=60) == 9


def test_queue_drains_on_both_a_slow_and_a_fast_worker() -> None:
    """Tasks queued behind a slow worker move to the fast one once it runs dry."""
    with SchedulerClusterCombo(n_workers=2, logging_level="ERROR", load_balance_seconds=0.2,
                               load_balance_trigger_times=1) as cluster:
        with Client(address=cluster.get_address()) as client:
            agents = []
            deadline = time.monotonic() + 30
            while len(agents) < 2 and time.monotonic() < deadline:
                agents = [p.pid for p in psutil.Process(cluster.cluster_pid).children()
                          if "scaler.worker.agent" in " ".join(p.cmdline())]
                time.sleep(0.1)
            slow_agent = agents[0]
            futures = [client.submit(slow_on_one_worker, i, slow_agent) for i in range(100)]
            results = [f.result(timeout=100) for f in futures]
            assert [value for value, _ in results] == list(range(100))
            ran_on = [agent for _, agent in results]
            on_slow = ran_on.count(slow_agent)
            # Without balancing the slow worker would keep its half (50 tasks, 25 s); with it, most move.
            assert on_slow < 25, f"{on_slow} of 100 tasks stayed on the slow worker"
            assert len(set(ran_on)) == 2


def long_on_one_worker(value: int, slow_pid: int, marker: str, gate: str) -> tuple[int, bool]:
    """The first task to run on the slow worker runs long (it claims the marker file): until the test opens the
    gate, once every quick task is back, or for 8 s at most; the rest are quick."""
    if os.getppid() == slow_pid:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            deadline = time.monotonic() + 8
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)
            return value, True
    time.sleep(0.01)
    return value, False


def test_tasks_queued_behind_a_long_running_task_move_to_an_idle_worker(tmp_path) -> None:
    """A worker busy with one long task gives up the tasks queued behind it while that task still runs."""
    marker = str(tmp_path / "long-task-started")
    with SchedulerClusterCombo(n_workers=2, logging_level="ERROR", load_balance_seconds=0.2,
                               load_balance_trigger_times=1) as cluster:
        with Client(address=cluster.get_address()) as client:
            agents: list[int] = []
            deadline = time.monotonic() + 30
            while len(agents) < 2 and time.monotonic() < deadline:
                agents = [p.pid for p in psutil.Process(cluster.cluster_pid).children()
                          if "scaler.worker.agent" in " ".join(p.cmdline())]
                time.sleep(0.1)
            gate = str(tmp_path / "gate")
            futures = [client.submit(long_on_one_worker, i, agents[0], marker, gate) for i in range(200)]
            order = []
            for future in concurrent.futures.as_completed(futures, timeout=60):
                order.append(future.result())
                # Every quick task back: the long one may end. The gate stays shut while quick tasks are stuck
                # behind it, so without balancing they still come after it (at its 8 s bound).
                if sum(1 for _, was_long in order if not was_long) == 199:
                    open(gate, "w").close()
            assert sorted(value for value, _ in order) == list(range(200))
            long_position = [was_long for _, was_long in order].index(True)
            # About half the tasks were queued on the slow worker behind the long one. Without balancing,
            # or with a worker that answers a release only between tasks, they would all finish after it.
            assert long_position >= 180, f"only {long_position} of 199 quick tasks finished before the long one"


def quick_or_gated(value: int, gated_value: int, gate: str) -> int:
    """Returns at once, but for `gated_value`, which waits for `gate` (20 s at most)."""
    deadline = time.monotonic() + 20
    while value == gated_value and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def test_results_of_quick_tasks_do_not_wait_for_the_long_task_after_them(tmp_path) -> None:
    """A processor sends its results in batches a few milliseconds apart: those of the quick tasks that ended
    just before a long one must still reach the client while the long one runs, not when it ends."""
    gate = str(tmp_path / "gate")
    count = 50
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR") as cluster:
        with Client(address=cluster.get_address()) as client:
            futures = [client.submit(quick_or_gated, i, count - 1, gate) for i in range(count)]
            done, not_done = concurrent.futures.wait(futures[:-1], timeout=10)
            late = sorted(futures.index(future) for future in not_done)
            assert not late, f"quick tasks {late} answered only after the long one"
            assert not futures[-1].done()
            open(gate, "w").close()
            assert [future.result(timeout=30) for future in futures] == list(range(count))
