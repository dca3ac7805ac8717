"""Draining a worker with real processes: its queue moves to the other worker, it gets nothing new, every
future gets its result, and once it holds nothing it can be stopped without losing a task."""

from __future__ import annotations

import os
import time

import pytest

from scaler import Client
from scaler.cluster.cluster import Cluster
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot

pytestmark = pytest.mark.timeout(120)


def slow_identity(value: int) -> tuple[int, int]:
    """The value, and the worker agent that ran it (the processor's parent)."""
    time.sleep(0.2)
    return value, os.getppid()


def test_draining_moves_the_queue_and_the_drained_worker_stops_without_losing_a_task(tmp_path) -> None:
    # Balancing off: whatever leaves the drained worker's queue leaves it because of the drain.
    with SchedulerProcess(str(tmp_path), "--load-balance-seconds", "0") as scheduler, \
            MonitorSubscriber(scheduler.monitor_address) as monitor:
        config = WorkerConfig(address=scheduler.address, logging_level="WARNING")
        with Cluster(config, ["leaving"]) as leaving, Client(scheduler.address, timeout_seconds=60) as client:
            leaving.start()
            (leaving_pid,) = leaving.worker_pids
            queued = [client.submit(slow_identity, value) for value in range(40)]
            wait_for_snapshot(
                monitor, lambda s: s.tasks.running + s.tasks.success == 40, 30, "40 tasks on the first worker"
            )
            with Cluster(config, ["staying"]) as staying:
                staying.start()
                (staying_pid,) = staying.worker_pids

                finished_before_drain = sum(future.done() for future in queued)
                result = client.drain_workers(["leaving", "nobody"])
                assert result.draining == ("leaving",) and result.unknown == ("nobody",)
                assert client.drain_workers(["leaving"]).draining == ("leaving",)  # again: no change
                later = [client.submit(slow_identity, value) for value in range(40, 50)]

                drained = wait_for_snapshot(
                    monitor, lambda s: any(w.name == "leaving" and w.draining and w.assigned == 0 for w in s.workers),
                    60, "the drained worker holding no task",
                )
                assert not any(w.draining for w in drained.workers if w.name == "staying")
                # Stopped while the other worker still has queued work: nothing it had is lost.
                leaving.shutdown()
                results = [future.result(timeout=90) for future in queued + later]

    assert [value for value, _ in results] == list(range(50))
    ran_on = [agent for _, agent in results]
    assert set(ran_on) <= {leaving_pid, staying_pid}
    # Besides what it had finished, only the task it was running (and one it may have been starting) when
    # drained finished on the drained worker: its queue moved. Without the drain it would run all 40.
    assert ran_on[:40].count(leaving_pid) <= finished_before_drain + 2, (finished_before_drain, ran_on)
    assert ran_on[:40].count(staying_pid) >= 40 - finished_before_drain - 2
    assert leaving_pid not in ran_on[40:], "a drained worker was sent a new task"


def test_drain_workers_wants_a_list_of_names(client: Client) -> None:
    with pytest.raises(TypeError, match=r"pass \[name\]"):
        client.drain_workers("worker-0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="worker names are str"):
        client.drain_workers([b"worker-0"])  # type: ignore[list-item]
    assert client.drain_workers([]).draining == ()
