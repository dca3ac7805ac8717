"""What stores tell the scheduler core of their objects (PROTOCOL.md §17, §18): objectsHeld makes a store a
holder of the objects it has (a copy it fetched, or all it holds after registering), and objectsLost from a
store drops that store, and only it, as a holder: what is left with no holder is recomputed, asked for again
or failed, exactly as when a store leaves."""

from __future__ import annotations

import dataclasses

from scaler.protocol import messages as m
from scaler.scheduler.core.object_lifetime.lineage import MAX_RESENDS
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimClient, SimStore, SimulatedCluster, SimWorker

STORE_A = "tcp://10.0.0.1:5000"
STORE_B = "tcp://10.0.0.2:5000"
BIG = 50 * 2**20


def _deletes(store) -> set[bytes]:
    return {object_id for message in store.received(m.DeleteObjects) for object_id in message.object_ids}


def _submit_with_client_object(cluster: SimulatedCluster, client, object_id: bytes, holder: str) -> list[int]:
    task_ids = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids, args=[object_id] * 2,
        object_arg_indices=[0, 1],
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[
        m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"),
        m.ObjectPayload(object_id=object_id, payload=b"", name="big", size=BIG, holder=holder),
    ], groups=[group]))
    return task_ids


@dataclasses.dataclass
class OneResult:
    """Two stores, a client, a worker of store A and the stored result of one of its tasks."""

    cluster: SimulatedCluster
    store_a: SimStore
    store_b: SimStore
    client: SimClient
    worker: SimWorker
    task_id: int
    object_id: bytes


def _one_stored_result() -> OneResult:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    store_b = cluster.add_store(STORE_B, host_key="host-b")
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    [task_id] = cluster.submit(client, 1)
    object_id = cluster.complete_stored(worker, [task_id], holder=STORE_A, size=BIG)[task_id]
    return OneResult(cluster, store_a, store_b, client, worker, task_id, object_id)


def test_a_result_its_store_lost_is_recomputed_as_if_the_store_had_left() -> None:
    one = _one_stored_result()
    cluster, store_a, client, worker, task_id, first_id = (
        one.cluster, one.store_a, one.client, one.worker, one.task_id, one.object_id
    )

    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[first_id]))

    assert cluster.core.counters["tasks_recomputed"] == 1 and list(worker.pending) == [task_id]
    assert first_id not in _deletes(store_a)  # the store has nothing to delete: it said so
    assert cluster.core.stores.store_of(STORE_A) is not None  # the store stays registered
    second_id = cluster.complete_stored(worker, [task_id], holder=STORE_B)[task_id]
    assert [stored.object_id for _, stored in client.outcomes[task_id]] == [first_id, second_id]


def test_a_lost_report_drops_only_the_reporting_store_when_another_holds_a_copy() -> None:
    one = _one_stored_result()
    cluster, store_a, store_b, client, worker, object_id = (
        one.cluster, one.store_a, one.store_b, one.client, one.worker, one.object_id
    )
    cluster.send(store_b.identity, m.ObjectsHeld(object_ids=[object_id], sizes=[BIG]))  # B fetched a copy
    assert cluster.core.objects.stored[object_id].holders == {STORE_A, STORE_B}

    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))

    assert cluster.core.objects.stored[object_id].holders == {STORE_B}
    assert cluster.core.counters["tasks_recomputed"] == 0 and worker.pending == {}
    # The copy is deleted with the object once its client lets go of it.
    cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))
    assert object_id in _deletes(store_b) and object_id not in _deletes(store_a)


def test_a_copy_reported_after_its_object_was_freed_is_deleted_and_unknown_ids_are_left_alone() -> None:
    one = _one_stored_result()
    cluster, store_b, client, object_id = one.cluster, one.store_b, one.client, one.object_id
    cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))
    not_named_yet = b"n" * 16  # a client's put whose submitTasks has not arrived yet

    out = cluster.send(store_b.identity, m.ObjectsHeld(object_ids=[object_id, not_named_yet], sizes=[1, 1]))

    assert out == [(store_b.identity, m.DeleteObjects(object_ids=[object_id]))]
    assert object_id not in cluster.core.objects.stored and not_named_yet not in cluster.core.objects.stored


def test_a_client_object_its_store_lost_is_asked_for_again_and_fails_its_tasks_when_it_cannot_come_back() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    object_id = b"o" * 16
    task_ids = _submit_with_client_object(cluster, client, object_id, STORE_A)

    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))
    assert client.received(m.ResendObjects)[-1].object_ids == [object_id]
    cluster.send(client.identity, m.ObjectsLost(object_ids=[object_id]))  # its lender exited: it has none

    for task_id in task_ids:
        [(kind, failure)] = client.outcomes[task_id]
        assert kind == "failed" and failure.type_name == "scaler.errors.ObjectLostError"
        assert object_id.hex() in failure.message


def test_a_client_object_lost_again_after_every_resend_fails_its_tasks_after_the_last_allowed_resend() -> None:
    """A lent object its store cannot read while its lender lives is reported lost after each resend: the
    scheduler asks for it MAX_RESENDS times, then fails its tasks naming it instead of asking forever."""
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    object_id = b"o" * 16
    task_ids = _submit_with_client_object(cluster, client, object_id, STORE_A)

    for _ in range(MAX_RESENDS):
        cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))
        assert client.received(m.ResendObjects)[-1].object_ids == [object_id]
        assert all(task_id not in client.outcomes for task_id in task_ids)
        cluster.send(client.identity, m.TaskSubmission(objects=[  # lent again, to the same store
            m.ObjectPayload(object_id=object_id, payload=b"", name="big", size=BIG, holder=STORE_A)
        ], groups=[]))
    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))

    assert len(client.received(m.ResendObjects)) == MAX_RESENDS
    for task_id in task_ids:
        [(kind, failure)] = client.outcomes[task_id]
        assert kind == "failed" and failure.type_name == "scaler.errors.ObjectLostError"
        assert object_id.hex() in failure.message and f"{MAX_RESENDS} times its client sent it again" in failure.message


def test_a_lost_client_object_that_a_store_turns_out_to_hold_comes_back_and_its_tasks_run() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    store_b = cluster.add_store(STORE_B, host_key="host-b")
    client = cluster.add_client()
    object_id = b"o" * 16
    task_ids = _submit_with_client_object(cluster, client, object_id, STORE_A)
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    worker = cluster.add_worker(store=STORE_B)
    assert worker.pending == {}

    cluster.send(store_b.identity, m.ObjectsHeld(object_ids=[object_id], sizes=[BIG]))  # its fetch crossed the loss

    assert set(worker.pending) == set(task_ids)
    shipped = [item for sub in worker.submissions() for item in sub.objects if item.object_id == object_id]
    assert [(item.holder, item.size) for item in shipped] == [(STORE_B, BIG)]
    cluster.complete(worker)
    assert all([kind for kind, _ in client.outcomes[task_id]] == ["ok"] for task_id in task_ids)


def test_a_copy_of_a_lost_result_being_made_again_is_deleted() -> None:
    one = _one_stored_result()
    cluster, store_b, object_id = one.cluster, one.store_b, one.object_id
    cluster.send(one.store_a.identity, m.ObjectsLost(object_ids=[object_id]))
    assert list(one.worker.pending) == [one.task_id]  # the rerun: the result comes back under another id

    out = cluster.send(store_b.identity, m.ObjectsHeld(object_ids=[object_id], sizes=[BIG]))

    assert out == [(store_b.identity, m.DeleteObjects(object_ids=[object_id]))]


def test_objects_held_with_ids_and_sizes_of_different_lengths_is_a_protocol_error() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE_A)
    out = cluster.send(store.identity, m.ObjectsHeld(object_ids=[b"x" * 16], sizes=[]))
    assert out == [(store.identity, m.ProtocolError(reason="objectsHeld has a different number of ids and sizes"))]
    assert cluster.core.stores.store_of(STORE_A) is not None


def test_a_task_submitted_while_its_object_is_lost_waits_for_the_object_instead_of_getting_it_empty() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    object_id = b"o" * 16
    first_tasks = _submit_with_client_object(cluster, client, object_id, STORE_A)
    worker = cluster.add_worker(capacity=1, store=STORE_A)
    cluster.complete(worker, task_ids=first_tasks[:1])
    cluster.complete(worker, task_ids=first_tasks[1:])
    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))

    [task_id] = client.next_task_ids(1)
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[task_id], args=[object_id],
        object_arg_indices=[0],
    )]))
    assert worker.pending == {}  # not shipped the object as an empty inline payload
    cluster.send(client.identity, m.TaskSubmission(objects=[
        m.ObjectPayload(object_id=object_id, payload=b"", name="big", size=BIG, holder=STORE_A)
    ], groups=[]))
    assert list(worker.pending) == [task_id]
    shipped = [item for sub in worker.submissions() for item in sub.objects if item.object_id == object_id]
    assert [(item.holder, item.payload) for item in shipped][-1] == (STORE_A, b"")


def test_a_client_object_put_again_after_a_store_brought_it_back_is_deleted_from_both_stores() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    store_b = cluster.add_store(STORE_B, host_key="host-b")
    client = cluster.add_client()
    object_id = b"o" * 16
    _submit_with_client_object(cluster, client, object_id, STORE_A)
    cluster.send(store_a.identity, m.ObjectsLost(object_ids=[object_id]))
    cluster.send(store_b.identity, m.ObjectsHeld(object_ids=[object_id], sizes=[BIG]))  # back before the resend
    cluster.send(client.identity, m.TaskSubmission(objects=[  # the answer to resendObjects, already on its way
        m.ObjectPayload(object_id=object_id, payload=b"", name="big", size=BIG, holder=STORE_A)
    ], groups=[]))
    assert cluster.core.objects.stored[object_id].holders == {STORE_A, STORE_B}
    cluster.send(client.identity, m.ClearRequest())
    assert object_id in _deletes(store_a) and object_id in _deletes(store_b)
