"""Every task a client submits ends counted in the monitor's task counts (PROTOCOL.md §12): those its client
left, timed out or cleared before they ended are `dropped`, whether queued, on a worker or parked."""

from __future__ import annotations

from scaler.protocol import messages as m
from tests.unit.core_harness import SimulatedCluster


def _accounted(cluster: SimulatedCluster) -> int:
    tasks = cluster.core.status(cluster.now).tasks
    held = tasks.unassigned + tasks.running + tasks.waiting_on_dependencies
    return held + tasks.success + tasks.failed + tasks.canceled + tasks.not_found + tasks.dropped


def test_tasks_of_a_client_that_leaves_or_times_out_or_clears_are_counted_as_dropped() -> None:
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=2)
    leaving, silent, clearing = cluster.add_client(), cluster.add_client(), cluster.add_client()
    submitted = 0
    for client in (leaving, silent, clearing):
        submitted += len(cluster.submit(client, 5))
    cluster.complete(worker, task_ids=list(worker.pending)[:1])  # one success
    assert _accounted(cluster) == submitted

    cluster.send(leaving.identity, m.Disconnect())
    cluster.send(clearing.identity, m.ClearRequest())
    cluster.heartbeat_all(except_for=[silent.identity])
    cluster.tick(advance=cluster.core._config.client_timeout_seconds + 1)

    tasks = cluster.core.status(cluster.now).tasks
    assert tasks.success == 1 and tasks.dropped == submitted - 1
    assert _accounted(cluster) == submitted
