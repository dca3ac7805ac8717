"""Draining workers in the scheduler core: a drained worker gets no new task, its queue moves elsewhere, what
it runs finishes there, and once it holds nothing it can go without losing a task."""

from __future__ import annotations

import pytest
from core_harness import SimulatedCluster, SimWorker, assert_no_task_state, payload_for

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig

pytestmark = pytest.mark.timeout(60)


def give_back_released(cluster: SimulatedCluster, worker: SimWorker, running: int) -> list[int]:
    """The worker obeys its ReleaseTasks as a real one does: all but its first `running` tasks (the ones it has
    started) come back as `returned`. Returns the ids it gave back."""
    released = [task_id for message in worker.received(m.ReleaseTasks) for task_id in message.task_ids]
    started = list(worker.pending)[:running]
    given_back = [
        task_id for task_id in dict.fromkeys(released) if task_id in worker.pending and task_id not in started
    ]
    cluster.complete(worker, task_ids=given_back, failure_kind=m.FailureKind.RETURNED)
    return given_back


def drain(cluster: SimulatedCluster, client_identity: bytes, *names: str) -> m.DrainWorkersResponse:
    out = cluster.send(client_identity, m.DrainWorkers(worker_names=list(names)))
    replies = [reply for identity, reply in out if identity == client_identity]
    assert len(replies) == 1 and isinstance(replies[0], m.DrainWorkersResponse), out
    return replies[0]


def test_a_drained_workers_queue_moves_to_another_and_its_running_task_finishes_there() -> None:
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=0))
    client = cluster.add_client()
    drained = cluster.add_worker(capacity=10)
    task_ids = cluster.submit(client, 10)
    other = cluster.add_worker(capacity=20)
    assert list(drained.pending) == task_ids and not other.pending

    assert drain(cluster, client.identity, "worker-0") == m.DrainWorkersResponse(draining=["worker-0"], unknown=[])
    (release,) = drained.received(m.ReleaseTasks)
    assert release.task_ids == task_ids
    given_back = give_back_released(cluster, drained, running=1)
    assert given_back == task_ids[1:]
    assert list(other.pending) == given_back

    more = cluster.submit(client, 5)
    assert set(more) <= set(other.pending), "a draining worker was given new tasks"
    assert drained.received_task_ids == task_ids
    cluster.run_to_completion()
    assert {task_id: outcomes for task_id, outcomes in client.outcomes.items()} == {
        task_id: [("ok", payload_for(task_id))] for task_id in task_ids + more
    }
    # Holding nothing now, it leaves (it is stopped): nothing is lost or run again.
    cluster.send(drained.identity, m.Disconnect(reason="stopped"))
    assert cluster.core.counters["tasks_rescheduled"] == len(given_back)
    assert_no_task_state(cluster.core)


def test_a_drained_worker_that_dies_before_giving_its_queue_back_loses_nothing() -> None:
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=0))
    client = cluster.add_client()
    drained = cluster.add_worker(capacity=4)
    task_ids = cluster.submit(client, 4)
    drain(cluster, client.identity, "worker-0")
    cluster.forget_worker(drained)
    cluster.now += CoreConfig().worker_timeout_seconds + 1
    cluster.heartbeat_all()
    cluster.tick()
    assert cluster.core.worker_count == 0 and cluster.core.unassigned_count == 4
    other = cluster.add_worker(capacity=4)
    assert sorted(other.pending) == sorted(task_ids)
    cluster.run_to_completion()
    assert all(len(client.outcomes[task_id]) == 1 for task_id in task_ids)
    assert_no_task_state(cluster.core)


def test_draining_is_idempotent_and_unknown_names_are_answered() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=4)
    cluster.submit(client, 3)
    first = drain(cluster, client.identity, "worker-0", "nobody", "worker-0")
    assert first == m.DrainWorkersResponse(draining=["worker-0"], unknown=["nobody"])
    again = drain(cluster, client.identity, "worker-0")
    assert again == m.DrainWorkersResponse(draining=["worker-0"], unknown=[])
    assert len(worker.received(m.ReleaseTasks)) == 1, "draining again asked the worker again"
    assert drain(cluster, client.identity) == m.DrainWorkersResponse(draining=[], unknown=[])


def test_every_worker_draining_keeps_tasks_waiting_until_a_worker_joins() -> None:
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=0))
    client = cluster.add_client()
    only = cluster.add_worker(capacity=2)
    drain(cluster, client.identity, "worker-0")
    task_ids = cluster.submit(client, 5)
    cluster.tick(1.0)
    assert only.pending == {} and cluster.core.unassigned_count == 5
    assert client.outcomes == {}
    joined = cluster.add_worker(capacity=5)
    assert sorted(joined.pending) == sorted(task_ids)
    cluster.run_to_completion()
    assert all(client.outcomes[task_id] == [("ok", payload_for(task_id))] for task_id in task_ids)
    assert_no_task_state(cluster.core)


def test_balancing_neither_feeds_nor_empties_a_draining_worker() -> None:
    config = CoreConfig(load_balance_seconds=1.0, load_balance_trigger_times=1)
    cluster = SimulatedCluster(config)
    client = cluster.add_client()
    busy = cluster.add_worker(capacity=10)
    cluster.submit(client, 10)
    idle = cluster.add_worker(capacity=10)
    drain(cluster, client.identity, "worker-1")
    for _ in range(5):
        cluster.heartbeat_all()
        cluster.tick(1.5)
    assert busy.received(m.ReleaseTasks) == [], "balancing moved tasks toward a draining worker"
    assert idle.received_task_ids == []


def test_workers_sharing_a_name_all_drain() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    cluster.workers[b"a"] = SimWorker(identity=b"a", capacity=2)
    cluster.workers[b"b"] = SimWorker(identity=b"b", capacity=2)
    for identity in (b"a", b"b"):
        cluster.send(identity, m.Hello(role=m.Role.WORKER, name="job-7|0", capacity=2))
    assert drain(cluster, client.identity, "job-7|0").draining == ["job-7|0"]
    assert all(worker.draining for worker in cluster.core.workers())


def test_the_monitor_status_says_which_workers_drain() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    cluster.add_worker()
    cluster.add_worker()
    drain(cluster, client.identity, "worker-1")
    status = cluster.core.status(cluster.now)
    assert {worker.name: worker.draining for worker in status.workers} == {"worker-0": False, "worker-1": True}


def test_a_worker_may_not_drain_workers() -> None:
    cluster = SimulatedCluster()
    worker = cluster.add_worker()
    out = cluster.send(worker.identity, m.DrainWorkers(worker_names=["worker-0"]))
    assert out == [(worker.identity, m.ProtocolError(reason="a worker may not send DrainWorkers; only clients do"))]
    assert not any(peer.draining for peer in cluster.core.workers())
