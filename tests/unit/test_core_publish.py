"""The scheduler core asks the maker of a large result to write it into its store only when someone else
reads it (worker/own_results.py): a dependent placed on another worker, or the client it is for."""

from __future__ import annotations

from scaler.protocol import messages as m
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimulatedCluster

STORE_A = "tcp://10.0.0.1:5000"


def _published_by(worker) -> list[bytes]:
    return [object_id for message in worker.received(m.PublishObjects) for object_id in message.object_ids]


def _quiet_parent_with_children(cluster: SimulatedCluster, client, children: int) -> tuple[int, list[int]]:
    parent_id, *child_ids = client.next_task_ids(1 + children)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[parent_id, *child_ids],
        args=[b"x"] + [b""] * children, ref_arg_indices=list(range(1, 1 + children)),
        ref_task_ids=[parent_id] * children,
    )
    cluster.send(client.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")], groups=[group],
        quiet_task_ids=[parent_id],
    ))
    return parent_id, child_ids


def test_a_result_read_only_on_the_worker_that_made_it_is_never_asked_for() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(STORE_A)
    client = cluster.add_client()
    maker = cluster.add_worker(capacity=2, store=STORE_A)
    parent_id, [child_id] = _quiet_parent_with_children(cluster, client, 1)
    cluster.complete_stored(maker, [parent_id], holder=STORE_A)
    assert list(maker.pending) == [child_id]
    cluster.complete(maker, task_ids=[child_id])
    assert _published_by(maker) == []


def test_the_maker_is_asked_to_write_a_result_that_a_dependent_on_another_worker_reads() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(STORE_A)
    client = cluster.add_client()
    maker = cluster.add_worker(capacity=1, store=STORE_A)
    parent_id, child_ids = _quiet_parent_with_children(cluster, client, 2)
    assert list(maker.pending) == [parent_id]
    other = cluster.add_worker(capacity=1, store=STORE_A)
    object_id = cluster.complete_stored(maker, [parent_id], holder=STORE_A)[parent_id]
    assert len(maker.pending) == len(other.pending) == 1  # one child each
    assert _published_by(maker) == [object_id]  # once, though two tasks read it
    assert _published_by(other) == []


def test_the_maker_is_asked_at_once_to_write_a_result_for_its_client() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(STORE_A)
    client = cluster.add_client()
    maker = cluster.add_worker(store=STORE_A)
    [task_id] = cluster.submit(client, 1)
    object_id = cluster.complete_stored(maker, [task_id], holder=STORE_A)[task_id]
    assert _published_by(maker) == [object_id]


def test_results_of_a_worker_that_left_before_anyone_asked_for_them_are_made_again() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    client = cluster.add_client()
    maker = cluster.add_worker(capacity=1, store=STORE_A)
    blocker = cluster.add_worker(capacity=1, store=STORE_A)
    [busy] = cluster.submit(client, 1)
    assert list(blocker.pending) == [busy] or list(maker.pending) == [busy]
    if list(maker.pending) == [busy]:
        maker, blocker = blocker, maker
    parent_id, [child_id] = _quiet_parent_with_children(cluster, client, 1)
    assert list(maker.pending) == [parent_id]
    object_id = cluster.complete_stored(maker, [parent_id], holder=STORE_A)[parent_id]
    assert list(maker.pending) == [child_id]

    cluster.send(maker.identity, m.Disconnect(reason="gone"))  # with the only copy of the parent's value
    assert object_id in {oid for message in store.received(m.DeleteObjects) for oid in message.object_ids}
    cluster.complete(blocker, task_ids=[busy])
    assert parent_id in blocker.pending  # made again before its child runs anywhere
