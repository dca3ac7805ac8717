"""Draining a worker with real processes: its queue moves to the other worker, it gets nothing new, every
future gets its result, and once it holds nothing it can be stopped without losing a task."""

from __future__ import annotations

import os
import pathlib

import pytest

from scaler import Client
from scaler.cluster.cluster import Cluster
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot
from tests.integration.waiting import wait_for_file

pytestmark = pytest.mark.timeout(120)

GATE_LIMIT_SECONDS = 90.0  # an upper bound against a hang: the test opens the gate long before


def gated_identity(value: int, gate: str) -> tuple[int, int]:
    """The value, and the worker agent that ran it (the processor's parent), once the test opens the gate."""
    wait_for_file(gate, GATE_LIMIT_SECONDS)
    return value, os.getppid()


def test_draining_moves_the_queue_and_the_drained_worker_stops_without_losing_a_task(tmp_path) -> None:
    gate = str(tmp_path / "gate")
    # Balancing and prefetch's paces off: whatever leaves the drained worker's queue leaves it because of the drain
    # (a worker held by the gate looks stalled, and prefetch would take its queue back), and the first worker
    # takes all 40 tasks of a function never measured.
    with SchedulerProcess(str(tmp_path), "--load-balance-seconds", "0", "--worker-queue-seconds", "0") as scheduler, \
            MonitorSubscriber(scheduler.monitor_address) as monitor:
        config = WorkerConfig(address=scheduler.address, logging_level="WARNING")
        try:
            with Cluster(config, ["leaving"]) as leaving, Client(scheduler.address, timeout_seconds=60) as client:
                leaving.start()
                (leaving_pid,) = leaving.worker_pids
                # The gate holds every task until the drain is seen: the first worker holds all 40 when drained.
                queued = [client.submit(gated_identity, value, gate) for value in range(40)]
                wait_for_snapshot(monitor, lambda s: s.tasks.running == 40, 30, "40 tasks on the first worker")
                with Cluster(config, ["staying"]) as staying:
                    staying.start()
                    (staying_pid,) = staying.worker_pids
                    wait_for_snapshot(monitor, lambda s: len(s.workers) == 2, 30, "the second worker registered")

                    result = client.drain_workers(["leaving", "nobody"])
                    assert result.draining == ("leaving",) and result.unknown == ("nobody",)
                    assert client.drain_workers(["leaving"]).draining == ("leaving",)  # again: no change
                    later = [client.submit(gated_identity, value, gate) for value in range(40, 50)]

                    # Its queue moved: it keeps only what it runs (and one it may have been starting).
                    moved = wait_for_snapshot(
                        monitor, lambda s: {w.name: w.assigned for w in s.workers}.get("leaving", 99) <= 2
                        and sum(w.assigned for w in s.workers) == 50, 60, "the drained worker's queue moved",
                    )
                    assert any(w.name == "leaving" and w.draining for w in moved.workers)
                    assert not any(w.draining for w in moved.workers if w.name == "staying")
                    assert not any(future.done() for future in queued + later)
                    pathlib.Path(gate).touch()
                    wait_for_snapshot(
                        monitor,
                        lambda s: any(w.name == "leaving" and w.draining and w.assigned == 0 for w in s.workers),
                        60, "the drained worker holding no task",
                    )
                    # Stopped while the other worker may still have queued work: nothing it had is lost.
                    leaving.shutdown()
                    results = [future.result(timeout=90) for future in queued + later]
        finally:
            pathlib.Path(gate).touch()  # whatever happened, no gated task waits past the test

    assert [value for value, _ in results] == list(range(50))
    ran_on = [agent for _, agent in results]
    assert set(ran_on) <= {leaving_pid, staying_pid}
    # Only the task it was running (and one it may have been starting) when drained finished on the drained
    # worker: its queue moved. Without the drain it would run all 40.
    assert ran_on[:40].count(leaving_pid) <= 2, ran_on
    assert ran_on[:40].count(staying_pid) >= 38, ran_on
    assert leaving_pid not in ran_on[40:], "a drained worker was sent a new task"


def test_drain_workers_wants_a_list_of_names(client: Client) -> None:
    with pytest.raises(TypeError, match=r"pass \[name\]"):
        client.drain_workers("worker-0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="worker names are str"):
        client.drain_workers([b"worker-0"])  # type: ignore[list-item]
    assert client.drain_workers([]).draining == ()
