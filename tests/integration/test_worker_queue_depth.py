"""Workers hold only as many tasks as keep them busy (scaler/scheduler/core/prefetch.py): a real scheduler and two
real workers with default settings, the depth of their queues read from the monitor feed (`assigned` per worker).

A flood of 10 ms tasks is held about 6 deep per worker (the running task and 50 ms of queued work), where a
worker filled up to --per-worker-queue-size held 1000: that depth is what another client's task waited behind.
A flood of no-op tasks still gets deep queues, which is what makes it fast.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.scheduler.monitor import MonitorSnapshot
from scaler.ui.feed import MonitorSubscriber

pytestmark = pytest.mark.timeout(120)

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
# Over half a second of 10 ms tasks queued on one worker: prefetch takes such an excess back, and a steady flood
# never builds it. Filled to its capacity as before, a worker held all of the flood's 350 each.
SHALLOW = 50
DEEP = 100


def sleep_ms(milliseconds: float) -> None:
    time.sleep(milliseconds / 1000)


def noop(value: int) -> int:
    return value


def deepest_queue_while(
    monitor: MonitorSubscriber, run: Callable[[threading.Event], object], snapshots_needed: int
) -> tuple[int, str]:
    """Runs `run(seen_enough)` in a thread: the most tasks one worker held in the snapshots published meanwhile, and
    what that snapshot said of each worker (for a failure to explain itself: its depth is what it held and had free).
    `seen_enough` is set once `snapshots_needed` snapshots showed tasks on workers."""
    done = threading.Event()
    seen_enough = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            run(seen_enough)
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deepest = seen = 0
    described = ""
    deadline = time.monotonic() + WAIT_SECONDS
    while not done.is_set() and time.monotonic() < deadline:
        snapshot: MonitorSnapshot | None = monitor.receive(0.5)
        if snapshot is not None and snapshot.tasks.running:
            seen += 1
            held = max(worker.assigned for worker in snapshot.workers)
            if held > deepest:
                deepest = held
                described = "; ".join(
                    f"{worker.name}: held {worker.assigned}, free {worker.free}, capacity {worker.capacity}, "
                    f"sent {worker.sent}" for worker in snapshot.workers
                ) + f"; waiting in the scheduler {snapshot.tasks.unassigned}"
            if seen >= snapshots_needed:
                seen_enough.set()
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive(), f"the tasks did not finish within {WAIT_SECONDS:g}s"
    if failure:
        raise failure[0]
    assert seen >= snapshots_needed, f"only {seen} snapshots while tasks ran: the tasks ran too fast to watch"
    return deepest, described


def test_a_flood_of_10ms_tasks_is_queued_shallow_and_a_flood_of_no_op_tasks_deep(tmp_path) -> None:
    monitor_address = f"ipc://{os.path.join(tmp_path, 'monitor')}"
    with SchedulerClusterCombo(
        n_workers=2, logging_level="INFO", monitor_address=monitor_address,
    ) as cluster, \
            MonitorSubscriber(monitor_address) as monitor, Client(address=cluster.get_address()) as client:
        # The warm-up runs no-op tasks, so each worker's own pace is tiny when the flood of a new function comes:
        # that function's pace bounds the depth (function_pace.py). Bounded by the worker's pace alone, each worker
        # took its whole capacity of the flood (350) until two samples of it came back, and the monitor caught a
        # worker holding 347 in some runs.
        assert client.map(noop, [(index,) for index in range(10)]) == list(range(10))
        # 700 tasks of 10 ms: 3.5 s on two workers, and the monitor publishes once a second.
        # The scheduler logs at INFO what would let a worker hold more (prefetch.py): its log is shown on a failure.
        deepest, described = deepest_queue_while(
            monitor, lambda seen_enough: client.map(sleep_ms, [(10,)] * 700), 2
        )
        assert 1 <= deepest <= SHALLOW, f"a worker held {deepest} tasks of 10 ms ({described})"

        def no_op_flood(seen_enough: threading.Event) -> None:
            while not seen_enough.is_set():  # as long as it takes the monitor to see it, on a machine of any speed
                assert client.map(noop, [(index,) for index in range(20000)])[-1] == 19999

        deepest, described = deepest_queue_while(monitor, no_op_flood, 2)
        assert deepest >= DEEP, f"no worker held more than {deepest} no-op tasks ({described})"
