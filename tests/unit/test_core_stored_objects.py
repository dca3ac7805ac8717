"""The scheduler core and stored objects (issue 15): it records where the bytes are, never the bytes.

Client objects and task results kept in stores are known by id, size and holders; a dependent of a
stored result gets the object id in that argument; deletes go to the holders once nobody needs an
object; and placement prefers the worker whose store holds a task's inputs, while balancing still works.
"""

from __future__ import annotations

import pytest

from scaler.protocol import capnp_codec
from scaler.protocol import messages as m
from scaler.utility.identifiers import random_object_id
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimStore, SimulatedCluster

STORE_A = "tcp://10.0.0.1:5000"
STORE_B = "tcp://10.0.0.2:5000"
BIG = 50 * 2**20


def _stored_object(holder: str, size: int = BIG) -> m.ObjectPayload:
    return m.ObjectPayload(object_id=random_object_id(), payload=b"", name="big", size=size, holder=holder)


def _submit_with_object(cluster: SimulatedCluster, client, objects: list[m.ObjectPayload], count: int) -> list[int]:
    """`count` tasks of one argument each, every one naming the first of `objects` as an object argument."""
    task_ids = client.next_task_ids(count)
    function = [] if FUNCTION_ID in client.sent_objects else [
        m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")
    ]
    client.sent_objects.add(FUNCTION_ID)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
        args=[objects[0].object_id] * count, object_arg_indices=list(range(count)),
    )
    cluster.send(client.identity, m.TaskSubmission(objects=function + objects, groups=[group]))
    return task_ids


def _deletes_to(cluster: SimulatedCluster, store: SimStore) -> set[bytes]:
    return {object_id for message in store.received(m.DeleteObjects) for object_id in message.object_ids}


def test_a_stored_client_object_reaches_the_worker_as_its_holder_and_size_only() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    big = _stored_object(STORE_A)
    _submit_with_object(cluster, client, [big], 1)

    record = cluster.core.objects.stored[big.object_id]
    assert (record.payload, record.size, record.holders) == (b"", BIG, {STORE_A})
    shipped = [item for sub in worker.submissions() for item in sub.objects if item.object_id == big.object_id]
    assert [(item.payload, item.size, item.holder) for item in shipped] == [(b"", BIG, STORE_A)]
    assert cluster.core.status(cluster.now).object_bytes >= BIG  # the monitor counts the stored bytes


def test_a_stored_result_goes_to_its_client_by_id_and_is_deleted_from_its_holder_when_released() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    [task_id] = cluster.submit(client, 1)
    object_ids = cluster.complete_stored(worker, [task_id], holder=STORE_A, size=BIG)

    [(kind, stored)] = client.outcomes[task_id]
    assert kind == "stored" and (stored.object_id, stored.size, stored.holder) == (object_ids[task_id], BIG, STORE_A)
    record = cluster.core.objects.stored[stored.object_id]
    assert (record.payload, record.producer, record.holders) == (b"", task_id, {STORE_A})
    assert _deletes_to(cluster, store) == set()

    cluster.send(client.identity, m.DeleteObjects(object_ids=[stored.object_id]))  # fetched: released
    assert stored.object_id not in cluster.core.objects.stored
    assert _deletes_to(cluster, store) == {stored.object_id}


def test_stored_results_of_a_client_that_leaves_are_deleted_from_their_holders() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    task_ids = cluster.submit(client, 3)
    object_ids = cluster.complete_stored(worker, task_ids, holder=STORE_A)
    cluster.send(client.identity, m.Disconnect(reason="bye"))
    assert _deletes_to(cluster, store) == set(object_ids.values())
    assert cluster.core.objects.stored == {}


def test_a_dependent_of_a_stored_result_gets_its_object_id_and_the_quiet_result_goes_when_it_ends() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    [parent_id, child_id] = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[parent_id, child_id],
        args=[b"x", b""], ref_arg_indices=[1], ref_task_ids=[parent_id],
    )
    cluster.send(client.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")], groups=[group],
        quiet_task_ids=[parent_id],
    ))
    object_id = cluster.complete_stored(worker, [parent_id], holder=STORE_A)[parent_id]
    assert client.outcomes[parent_id] == []  # quiet: the client never sees it

    sent = worker.submissions()[-1]
    [child_group] = sent.groups
    assert child_group.task_ids == [child_id]
    assert child_group.args == [object_id] and child_group.object_arg_indices == [0]
    assert [(item.object_id, item.holder, item.payload) for item in sent.objects] == [(object_id, STORE_A, b"")]
    assert _deletes_to(cluster, store) == set()  # the child still needs it

    cluster.complete(worker, task_ids=[child_id])
    assert [kind for kind, _ in client.outcomes[child_id]] == ["ok"]
    assert _deletes_to(cluster, store) == {object_id}
    assert object_id in {oid for message in worker.received(m.DeleteObjects) for oid in message.object_ids}
    assert cluster.core.objects.stored.keys() == {FUNCTION_ID}


def test_a_quiet_stored_result_is_deleted_when_its_dependent_is_canceled() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=1, store=STORE_A)
    blocker = cluster.submit(client, 1)[0]  # keeps the only slot busy, so the child waits in the queue
    [parent_id, child_id] = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[parent_id, child_id],
        args=[b"x", b""], ref_arg_indices=[1], ref_task_ids=[parent_id],
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group], quiet_task_ids=[parent_id]))
    cluster.complete(worker, task_ids=[blocker])
    object_id = cluster.complete_stored(worker, [parent_id], holder=STORE_A)[parent_id]
    cluster.send(client.identity, m.ClearRequest())
    assert _deletes_to(cluster, store) == {object_id}


def test_a_stored_result_with_a_malformed_or_reused_id_fails_the_task() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    first, second = cluster.submit(client, 2)
    cluster.complete_stored(worker, [first], holder=STORE_A)
    reused = first.to_bytes(16, "little")
    cluster.send(worker.identity, m.TaskResults(succeeded_ids=[], payloads=[], failures=[], stored=[
        m.StoredResult(task_id=second, object_id=reused, size=1, holder=STORE_A)
    ]))
    [(kind, failure)] = client.outcomes[second]
    assert kind == "failed" and failure.kind == m.FailureKind.SERIALIZATION and "in use" in failure.message


def test_placement_prefers_the_worker_whose_store_holds_the_inputs() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    near_a = cluster.add_worker(store=STORE_A)
    near_b = cluster.add_worker(store=STORE_B)
    on_b = _stored_object(STORE_B)
    [task_id] = _submit_with_object(cluster, client, [on_b], 1)
    assert list(near_b.pending) == [task_id] and not near_a.pending

    on_a = _stored_object(STORE_A)
    [task_id] = _submit_with_object(cluster, client, [on_a], 1)
    assert list(near_a.pending) == [task_id]


def test_among_the_workers_of_one_store_a_dependent_goes_to_the_worker_that_made_its_input() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(STORE_A)
    client = cluster.add_client()
    first, second = (cluster.add_worker(capacity=1, store=STORE_A) for _ in range(2))
    [blocker] = cluster.submit(client, 1)  # the first worker is busy, so the second makes the input
    [parent_id, child_id] = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[parent_id, child_id],
        args=[b"x", b""], ref_arg_indices=[1], ref_task_ids=[parent_id],
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group]))
    assert list(first.pending) == [blocker] and list(second.pending) == [parent_id]
    cluster.complete(first, task_ids=[blocker])
    cluster.complete_stored(second, [parent_id], holder=STORE_A)
    # Both workers share the store and are idle, the first would come first: the maker's processor still
    # has the value, so it gets the child.
    assert list(second.pending) == [child_id] and not first.pending


def test_the_worker_that_made_a_freed_result_is_told_to_forget_it_though_it_was_never_sent_it() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(STORE_A)
    client = cluster.add_client()
    maker = cluster.add_worker(capacity=1, store=STORE_A)
    [parent_id] = cluster.submit(client, 1)
    object_id = cluster.complete_stored(maker, [parent_id], holder=STORE_A)[parent_id]
    assert not any(object_id in message.object_ids for message in maker.received(m.DeleteObjects))
    cluster.send(client.identity, m.ClearRequest())  # the client lets go of the result
    assert any(object_id in message.object_ids for message in maker.received(m.DeleteObjects))


def test_placement_by_data_still_spreads_tasks_when_all_data_is_on_one_host() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    near_a = cluster.add_worker(capacity=100, store=STORE_A)
    far = [cluster.add_worker(capacity=100, store=STORE_B) for _ in range(2)]
    on_a = _stored_object(STORE_A)
    _submit_with_object(cluster, client, [on_a], 60)

    # Locality wins a larger share for the holder's worker, and no worker is left idle.
    assert len(near_a.pending) > max(len(worker.pending) for worker in far)
    assert all(worker.pending for worker in far)
    assert sum(len(worker.pending) for worker in [near_a, *far]) == 60
    cluster.run_to_completion()
    assert all(len(outcomes) == 1 for outcomes in client.outcomes.values())


def test_placement_without_stored_objects_is_the_water_fill_of_before() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=100, store=STORE_A) for _ in range(3)]
    cluster.submit(client, 30)
    assert [len(worker.pending) for worker in workers] == [10, 10, 10]


@pytest.mark.parametrize("message", [
    m.TaskSubmission(objects=[m.ObjectPayload(object_id=b"o" * 16, payload=b"", name="n", size=7, holder=STORE_A)],
                     groups=[]),
    m.TaskResults(succeeded_ids=[1], payloads=[b"r"], failures=[], stored=[
        m.StoredResult(task_id=2, object_id=b"p" * 16, size=BIG, holder=STORE_B)
    ]),
    m.Welcome(inline_limit_bytes=1 << 20),
])
def test_stored_objects_and_results_survive_the_wire(message: m.Message) -> None:
    assert m.decode(m.encode(message)) == message


def test_a_stored_object_that_also_carries_a_payload_is_refused_by_the_decoder() -> None:
    builder = capnp_codec._schema.Message.new_message()
    [item] = builder.init("submitTasks").init("objects", 1)
    item.objectId, item.payload, item.size, item.holder = b"o" * 16, b"bytes", 5, STORE_A
    with pytest.raises(m.ProtocolDecodeError, match="stored object carries a payload"):
        m.decode([builder.to_bytes()])
