"""Capability routing in the scheduler core: tasks requiring tags run only on workers that have them all.

Driven by the simulated cluster of core_harness.py, which also checks that no worker is ever handed a
task requiring tags it lacks (and the core's invariants, after every message).
"""

from __future__ import annotations

import pytest
from core_harness import SimulatedCluster, assert_no_task_state

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.no_capable_worker import NO_CAPABLE_WORKER

pytestmark = pytest.mark.timeout(30)


def outcome_kinds(client, task_ids):
    return [client.outcomes[task_id] for task_id in task_ids]


def test_tagged_tasks_go_only_to_workers_with_every_tag():
    cluster = SimulatedCluster()
    plain = cluster.add_worker(capacity=10, tags=["python"])
    gpu = cluster.add_worker(capacity=10, tags=["python", "gpu"])
    client = cluster.add_client()
    gpu_ids = cluster.submit(client, 6, tags=["gpu", "python"])
    any_ids = cluster.submit(client, 6)
    assert set(gpu_ids) <= set(gpu.pending)
    assert not set(gpu_ids) & set(plain.pending)
    assert set(any_ids) & set(plain.pending), "untagged tasks still use every worker"
    cluster.run_to_completion()
    assert set(gpu.received_task_ids) >= set(gpu_ids)
    assert all(client.outcomes[task_id] == [("ok", b"result-%d" % task_id)] for task_id in gpu_ids + any_ids)
    assert_no_task_state(cluster.core)


def test_a_task_no_worker_can_run_waits_is_shown_and_runs_when_a_capable_worker_joins():
    cluster = SimulatedCluster()
    plain = cluster.add_worker(capacity=10, tags=["python"])
    client = cluster.add_client()
    ids = cluster.submit(client, 4, tags=["gpu"])
    others = cluster.submit(client, 2)
    assert not set(ids) & set(plain.pending) and set(others) <= set(plain.pending)
    for _ in range(5):
        cluster.tick(10.0)
        cluster.heartbeat_all()
    assert not any(client.outcomes.get(task_id) for task_id in ids), "waits forever without a limit, not lost"
    status = cluster.core.status(cluster.now)
    assert [(wait.tags, wait.tasks) for wait in status.waiting_for_tags] == [(["gpu"], 4)]
    assert status.tasks.unassigned == 4
    gpu = cluster.add_worker(capacity=2, tags=["gpu"])
    assert set(gpu.pending) == set(ids[:2]), "dispatched as soon as it joins, up to its capacity"
    assert cluster.core.status(cluster.now).waiting_for_tags == [], "a capable worker exists: busy, not waiting"
    cluster.run_to_completion()
    assert all(client.outcomes[task_id] == [("ok", b"result-%d" % task_id)] for task_id in ids)
    assert_no_task_state(cluster.core)


def test_waiting_for_tags_times_out_with_an_error_naming_the_tags():
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=10, tags=["python"])
    cluster.add_worker(capacity=10, tags=["native"])
    client = cluster.add_client()
    ids = cluster.submit(client, 3, tags=["gpu", "python"], wait_for_tags_ms=5000)
    cluster.tick(4.0)
    assert not any(client.outcomes.get(task_id) for task_id in ids)
    cluster.tick(1.5)
    for task_id in ids:
        [(outcome, failure)] = client.outcomes[task_id]
        assert outcome == "failed" and failure.kind == m.FailureKind.REJECTED
        assert failure.type_name == NO_CAPABLE_WORKER
        assert "{gpu, python}" in failure.message and "none has {gpu}" in failure.message
        assert "{native}" in failure.message and "{python}" in failure.message
    assert_no_task_state(cluster.core)


def test_the_limit_does_not_fail_tasks_a_connected_worker_can_run():
    cluster = SimulatedCluster()
    gpu = cluster.add_worker(capacity=1, tags=["gpu"])
    client = cluster.add_client()
    ids = cluster.submit(client, 3, tags=["gpu"], wait_for_tags_ms=1000)
    for _ in range(3):
        cluster.tick(1.0)
        cluster.heartbeat_all()
    assert not any(client.outcomes.get(task_id) for task_id in ids), "busy capable worker: they wait their turn"
    cluster.run_to_completion(batch=1)
    assert all(client.outcomes[task_id] == [("ok", b"result-%d" % task_id)] for task_id in ids)
    assert gpu.received_task_ids == ids


def test_tasks_of_a_capable_worker_that_dies_wait_for_the_next_one():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5.0))
    cluster.add_worker(capacity=10, tags=["python"])
    gpu = cluster.add_worker(capacity=10, tags=["gpu"])
    client = cluster.add_client()
    ids = cluster.submit(client, 3, tags=["gpu"])
    assert set(gpu.pending) == set(ids)
    cluster.forget_worker(gpu)
    cluster.send(gpu.identity, m.Disconnect())
    assert [(wait.tags, wait.tasks) for wait in cluster.core.status(cluster.now).waiting_for_tags] == [(["gpu"], 3)]
    second = cluster.add_worker(capacity=10, tags=["gpu", "python"])
    assert set(second.pending) == set(ids)
    cluster.run_to_completion()
    assert all(client.outcomes[task_id] == [("ok", b"result-%d" % task_id)] for task_id in ids)


def test_balancing_moves_tasks_only_between_workers_with_the_same_tags():
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=1.0, load_balance_trigger_times=1))
    busy = cluster.add_worker(capacity=10, tags=["gpu"])
    client = cluster.add_client()
    ids = cluster.submit(client, 6, tags=["gpu"])
    assert set(busy.pending) == set(ids)
    idle_plain = cluster.add_worker(capacity=10, tags=["python"])
    for _ in range(3):
        cluster.tick(1.0)
        cluster.heartbeat_all()
    assert not busy.received(m.ReleaseTasks), "the only idle worker cannot run them: nothing to move"
    idle_gpu = cluster.add_worker(capacity=10, tags=["gpu"])
    for _ in range(3):
        if busy.received(m.ReleaseTasks):
            break
        cluster.tick(1.0)
        cluster.heartbeat_all()
    (release,) = busy.received(m.ReleaseTasks)
    cluster.complete(busy, task_ids=release.task_ids, failure_kind=m.FailureKind.RETURNED)
    assert set(idle_gpu.pending) == set(release.task_ids)
    assert not idle_plain.pending
    cluster.run_to_completion()
    assert all(client.outcomes[task_id] == [("ok", b"result-%d" % task_id)] for task_id in ids)


def test_a_tag_set_waiting_does_not_hold_up_balancing_of_other_workers():
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=1.0, load_balance_trigger_times=1))
    busy = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    cluster.submit(client, 2, tags=["gpu"])  # no gpu worker: they wait in the scheduler
    ids = cluster.submit(client, 4)
    assert set(busy.pending) == set(ids)
    cluster.add_worker(capacity=10)
    for _ in range(3):
        cluster.tick(1.0)
        cluster.heartbeat_all()
    assert busy.received(m.ReleaseTasks)


def test_queues_sharing_workers_take_turns():
    """Two tag sets that the same one-slot worker serves: neither waits until the other's queue is empty."""
    cluster = SimulatedCluster()
    client = cluster.add_client()
    first = cluster.submit(client, 5, tags=["a"])
    second = cluster.submit(client, 5, tags=["b"])
    worker = cluster.add_worker(capacity=1, tags=["a", "b"])
    for _ in range(4):
        cluster.complete(worker)
    handed = worker.received_task_ids
    assert set(handed) & set(first) and set(handed) & set(second)
    cluster.run_to_completion()
    assert all(len(client.outcomes[task_id]) == 1 for task_id in first + second)


def test_an_empty_required_tag_is_rejected_and_an_empty_worker_tag_refused():
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=1)
    client = cluster.add_client()
    [task_id] = cluster.submit(client, 1, tags=[""])
    [(outcome, failure)] = client.outcomes[task_id]
    assert failure.kind == m.FailureKind.REJECTED and "tag is empty" in failure.message
    out = cluster.send(b"bad-worker", m.Hello(role=m.Role.WORKER, capacity=1, tags=("gpu", "")))
    assert isinstance(out[0][1], m.Refused) and "tag is empty" in out[0][1].reason
