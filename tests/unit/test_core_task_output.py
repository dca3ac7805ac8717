"""The scheduler passes what a task prints (taskOutput) to the task's client, and only that (output_routing.py)."""

from __future__ import annotations

import pytest
from core_harness import SimulatedCluster

from scaler.protocol import messages as m

pytestmark = pytest.mark.timeout(60)


def _setup(stream_output: bool = True):
    """Two tasks held by one worker; a second worker, which holds none of them, joins after."""
    cluster = SimulatedCluster()
    client = cluster.add_client()
    other_client = cluster.add_client()
    worker = cluster.add_worker(capacity=10)
    task_ids = cluster.submit(client, 2, stream_output=stream_output)
    assert set(worker.pending) == set(task_ids)
    idle_worker = cluster.add_worker(capacity=10)
    return cluster, client, other_client, worker, idle_worker, task_ids


def test_output_of_a_task_that_asked_reaches_its_client_named_by_the_worker() -> None:
    cluster, client, other_client, worker, _, task_ids = _setup()
    cluster.send(worker.identity, m.TaskOutput(
        task_ids=[task_ids[0], task_ids[1]], streams=[0, 2], texts=["hello\n", "WARNING x: y\n"], worker="forged",
    ))
    received = client.received(m.TaskOutput)
    assert len(received) == 1
    assert received[0].task_ids == task_ids and received[0].texts == ["hello\n", "WARNING x: y\n"]
    assert received[0].streams == [0, 2]
    assert received[0].worker == worker.identity.decode()  # the hello name, not what the worker wrote
    assert not other_client.received(m.TaskOutput)


def test_output_of_tasks_that_did_not_ask_or_are_not_the_senders_goes_nowhere() -> None:
    cluster, client, _, worker, idle_worker, task_ids = _setup(stream_output=False)
    cluster.send(worker.identity, m.TaskOutput(task_ids=[task_ids[0]], streams=[0], texts=["x\n"]))
    assert not client.received(m.TaskOutput)
    cluster2, client2, _, worker2, idle_worker2, task_ids2 = _setup()
    cluster2.send(idle_worker2.identity, m.TaskOutput(task_ids=[task_ids2[0]], streams=[0], texts=["x\n"]))
    cluster2.send(worker2.identity, m.TaskOutput(task_ids=[12345], streams=[0], texts=["x\n"]))
    assert not client2.received(m.TaskOutput)


@pytest.mark.parametrize("output", [
    m.TaskOutput(task_ids=[1], streams=[0, 1], texts=["x\n"]),
    m.TaskOutput(task_ids=[1], streams=[7], texts=["x\n"]),
    m.TaskOutput(task_ids=[1], streams=[0], texts=["x" * (m.MAX_TASK_OUTPUT_MESSAGE_CHARS + 1)]),
])
def test_a_malformed_or_oversized_output_is_refused_and_the_worker_stays(output: m.TaskOutput) -> None:
    cluster, client, _, worker, _, task_ids = _setup()
    output.task_ids = [task_ids[0]] * len(output.task_ids)
    cluster.send(worker.identity, output)
    assert worker.received(m.ProtocolError)
    assert not client.received(m.TaskOutput)
    assert worker.identity in cluster.core.peers.workers
