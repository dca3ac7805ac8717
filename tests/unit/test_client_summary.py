"""Each client's queued and running tasks and its oldest ready task's wait (TaskTable.client_summary), as
the monitor feed shows them: a real scheduler core, played by the simulated cluster."""

from __future__ import annotations

import pytest
from core_harness import FUNCTION_ID, SimulatedCluster

from scaler.protocol import messages as m
from scaler.scheduler.core.client_summary import ClientSummary

pytestmark = pytest.mark.timeout(30)


def summary_of(cluster: SimulatedCluster, client_identity: bytes, later: float = 0.0) -> ClientSummary:
    peer = cluster.core.peers.clients[client_identity]
    return cluster.core.tasks.client_summary(peer, cluster.now + later)


def test_a_backlog_shows_queued_running_and_a_growing_oldest_wait_and_an_idle_client_shows_nothing() -> None:
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=2)
    busy, idle = cluster.add_client(), cluster.add_client()
    submitted_at = cluster.now
    cluster.submit(busy, 5)
    cluster.tick(advance=3.0)

    assert summary_of(cluster, busy.identity) == ClientSummary(queued=3, running=2, oldest_ready_seconds=3.0)
    assert summary_of(cluster, busy.identity, later=2.0).oldest_ready_seconds == 5.0
    assert summary_of(cluster, idle.identity) == ClientSummary(queued=0, running=0, oldest_ready_seconds=0.0)

    # Two finish, two more go out: the one left has waited since it was submitted.
    cluster.now += 1.0
    cluster.complete(worker, 2)
    assert summary_of(cluster, busy.identity) == ClientSummary(
        queued=1, running=2, oldest_ready_seconds=cluster.now - submitted_at
    )
    cluster.run_to_completion()
    assert summary_of(cluster, busy.identity) == ClientSummary(queued=0, running=0, oldest_ready_seconds=0.0)


def test_the_oldest_wait_is_that_of_the_longest_waiting_task_of_that_client_only() -> None:
    cluster = SimulatedCluster()
    first, second = cluster.add_client(), cluster.add_client()
    cluster.submit(first, 2)
    cluster.now += 4.0
    cluster.submit(first, 3)
    cluster.submit(second, 1)
    cluster.now += 1.0
    assert summary_of(cluster, first.identity) == ClientSummary(queued=5, running=0, oldest_ready_seconds=5.0)
    assert summary_of(cluster, second.identity) == ClientSummary(queued=1, running=0, oldest_ready_seconds=1.0)


def test_tasks_waiting_on_dependencies_are_neither_queued_nor_running_and_wait_from_when_they_became_ready() -> None:
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    client = cluster.add_client()
    (plain_id,) = cluster.submit(client, 1)  # sends the function, takes the worker's only slot
    parent_id, child_id = client.next_task_ids(2)
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[parent_id, child_id], args=[b"x", b""],
        ref_arg_indices=[1], ref_task_ids=[parent_id],
    )]))
    cluster.now += 10.0
    # The parent is queued, the child parked on it: three unfinished tasks, two of them counted here.
    assert summary_of(cluster, client.identity) == ClientSummary(queued=1, running=1, oldest_ready_seconds=10.0)
    assert len(cluster.core.peers.clients[client.identity].task_ids) == 3

    cluster.complete(worker, task_ids=[plain_id])  # the parent goes out
    cluster.now += 2.0
    cluster.complete(worker, task_ids=[parent_id])  # the child becomes ready, and goes out
    assert summary_of(cluster, client.identity) == ClientSummary(queued=0, running=1, oldest_ready_seconds=0.0)


def test_tasks_given_back_by_a_leaving_worker_are_queued_again_from_the_time_they_came_back() -> None:
    cluster = SimulatedCluster()
    dying = cluster.add_worker(capacity=3)
    client = cluster.add_client()
    cluster.submit(client, 3)
    assert summary_of(cluster, client.identity).running == 3
    cluster.now += 7.0
    cluster.send(dying.identity, m.Disconnect(reason="stopping"))
    cluster.forget_worker(dying)
    assert dying.identity.decode() not in {worker.name for worker in cluster.core.workers()}
    assert summary_of(cluster, client.identity, later=0.5) == ClientSummary(
        queued=3, running=0, oldest_ready_seconds=0.5
    )


def test_the_summaries_add_up_to_the_schedulers_own_counts() -> None:
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=4) for _ in range(3)]
    clients = [cluster.add_client() for _ in range(4)]
    for index, client in enumerate(clients):
        cluster.submit(client, 5 * index)
    cluster.complete(workers[0], 3)
    status = cluster.core.status(cluster.now)
    assert sum(row.queued for row in status.clients) == status.tasks.unassigned == cluster.core.tasks.waiting
    assert sum(row.running for row in status.clients) == status.tasks.running
    assert [row.share for row in status.clients] == [1.0] * 4
    assert [row.tasks for row in status.clients] == [row.queued + row.running for row in status.clients]
