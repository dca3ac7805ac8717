"""The scheduler core and kept results (TaskGroup.keepResults, PROTOCOL.md §7 "Kept results").

A kept task's outcome stays with the scheduler for its client; a later task naming it in refTaskIds gets
it as an object argument if it finished (or as a graph edge while it runs), shares its failure if it
failed, and keeps the result alive until it ends even if the client deletes it meanwhile.
"""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.utility.identifiers import kept_result_id
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimClient, SimulatedCluster, payload_for

STORE = "tcp://10.0.0.1:5000"


def _submit(
    cluster: SimulatedCluster, client: SimClient, *, keep: bool = False, refs: tuple[int, ...] = ()
) -> int:
    """One task of one argument per reference (or one literal argument); returns its id."""
    [task_id] = client.next_task_ids(1)
    objects = [] if FUNCTION_ID in client.sent_objects else [
        m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")
    ]
    client.sent_objects.add(FUNCTION_ID)
    width = max(len(refs), 1)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=width, keywords=(), task_ids=[task_id],
        args=[b""] * len(refs) if refs else [b"literal"], ref_arg_indices=list(range(len(refs))),
        ref_task_ids=list(refs), keep_results=keep,
    )
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
    return task_id


def _shipped_objects(worker) -> dict[bytes, m.ObjectPayload]:
    return {item.object_id: item for sub in worker.submissions() for item in sub.objects}


def _group_of(worker, task_id: int) -> tuple[m.TaskGroup, int]:
    for submission in worker.submissions():
        for group in submission.groups:
            if task_id in group.task_ids:
                return group, group.task_ids.index(task_id)
    raise AssertionError(f"task {task_id:#x} never reached the worker")


def test_a_small_kept_result_is_kept_under_its_derived_id_and_fed_to_a_later_task_as_an_object() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    kept = _submit(cluster, client, keep=True)
    cluster.complete(worker)
    assert client.outcomes[kept] == [("ok", payload_for(kept))]  # the client hears of it as usual
    object_id = kept_result_id(kept)
    assert cluster.core.objects.stored[object_id].payload == payload_for(kept)

    dependent = _submit(cluster, client, refs=(kept,))  # after it finished: no rejection
    group, row = _group_of(worker, dependent)
    assert group.args[row] == object_id and group.object_arg_indices == [row]
    assert not group.ref_task_ids
    assert _shipped_objects(worker)[object_id].payload == payload_for(kept)

    # Released while the dependent runs: the result stays until the dependent ends.
    cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))
    assert object_id in cluster.core.objects.stored
    cluster.complete(worker)
    assert client.outcomes[dependent] == [("ok", payload_for(dependent))]
    assert object_id not in cluster.core.objects.stored
    assert object_id not in worker.objects  # the worker was told to delete it
    assert not cluster.core.objects.kept


def test_a_reference_to_a_running_kept_task_is_a_graph_edge() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    kept = _submit(cluster, client, keep=True)
    dependent = _submit(cluster, client, refs=(kept,))
    assert dependent not in worker.pending
    cluster.complete(worker)
    group, row = _group_of(worker, dependent)
    assert group.args[row] == payload_for(kept) and not group.object_arg_indices
    assert kept_result_id(kept) in cluster.core.objects.stored  # kept for later tasks too


def test_a_stored_kept_result_is_an_object_argument_of_a_later_task_and_outlives_its_release() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(STORE)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE)
    kept = _submit(cluster, client, keep=True)
    object_id = cluster.complete_stored(worker, [kept], holder=STORE, size=20 << 20)[kept]
    assert client.outcomes[kept][0][0] == "stored"

    dependent = _submit(cluster, client, refs=(kept,))
    group, row = _group_of(worker, dependent)
    assert group.args[row] == object_id and group.object_arg_indices == [row]
    shipped = _shipped_objects(worker)[object_id]
    assert (shipped.payload, shipped.holder) == (b"", STORE)  # the bytes stay in the store

    cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))
    deleted = {oid for message in store.received(m.DeleteObjects) for oid in message.object_ids}
    assert object_id not in deleted
    cluster.complete(worker)
    deleted = {oid for message in store.received(m.DeleteObjects) for oid in message.object_ids}
    assert object_id in deleted and object_id not in cluster.core.objects.stored


def test_a_later_task_of_a_failed_kept_task_fails_with_its_failure_until_the_client_deletes_it() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    kept = _submit(cluster, client, keep=True)
    cluster.complete(worker, failure_kind=m.FailureKind.RAISED)
    dependent = _submit(cluster, client, refs=(kept,))
    [(kind, failure)] = client.outcomes[dependent]
    assert kind == "failed" and (failure.kind, failure.type_name, failure.task_id) == (
        m.FailureKind.RAISED, "E", dependent
    )
    assert dependent not in worker.received_task_ids

    cluster.send(client.identity, m.DeleteObjects(object_ids=[kept_result_id(kept)]))  # released
    late = _submit(cluster, client, refs=(kept,))
    [(kind, failure)] = client.outcomes[late]
    assert kind == "failed" and failure.kind == m.FailureKind.REJECTED


def test_a_dependent_in_the_same_message_as_a_doomed_task_fails_too() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    kept = _submit(cluster, client, keep=True)
    cluster.complete(worker, failure_kind=m.FailureKind.RAISED)
    first, second = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[first, second], args=[b"", b""],
        ref_arg_indices=[0, 1], ref_task_ids=[kept, first],
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group]))
    assert [outcome[0][0] for outcome in (client.outcomes[first], client.outcomes[second])] == ["failed", "failed"]
    assert not cluster.core.tasks.records


def test_a_finished_task_not_kept_still_cannot_be_referenced() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    plain = _submit(cluster, client)
    _submit(cluster, client, keep=True)
    cluster.complete(worker)
    dependent = _submit(cluster, client, refs=(plain,))
    [(kind, failure)] = client.outcomes[dependent]
    assert kind == "failed" and failure.kind == m.FailureKind.REJECTED


def test_another_clients_kept_task_cannot_be_referenced() -> None:
    cluster = SimulatedCluster()
    owner = cluster.add_client()
    other = cluster.add_client()
    worker = cluster.add_worker()
    kept = _submit(cluster, owner, keep=True)
    cluster.complete(worker)
    dependent = _submit(cluster, other, refs=(kept,))
    [(kind, failure)] = other.outcomes[dependent]
    assert kind == "failed" and failure.kind == m.FailureKind.REJECTED


def test_a_client_that_leaves_lets_go_of_its_kept_outcomes() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    succeeded = _submit(cluster, client, keep=True)
    cluster.complete(worker)
    _submit(cluster, client, keep=True)
    cluster.complete(worker, failure_kind=m.FailureKind.RAISED)
    assert cluster.core.objects.kept.objects and cluster.core.objects.kept.failures
    cluster.send(client.identity, m.Disconnect(reason="bye"))
    assert not cluster.core.objects.kept
    assert kept_result_id(succeeded) not in cluster.core.objects.stored


def test_a_kept_result_lost_with_its_store_is_made_again_and_kept_under_its_new_id() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE)
    cluster.add_store("tcp://10.0.0.2:5000")
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE)
    kept = _submit(cluster, client, keep=True)
    first_id = cluster.complete_stored(worker, [kept], holder=STORE)[kept]
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    assert list(worker.pending) == [kept]  # run again: its client still keeps it
    dependent = _submit(cluster, client, refs=(kept,))  # meanwhile: it waits for the new result
    second_id = cluster.complete_stored(worker, [kept], holder="tcp://10.0.0.2:5000")[kept]
    assert [stored.object_id for _, stored in client.outcomes[kept]] == [first_id, second_id]
    assert cluster.core.objects.kept.objects[kept] == second_id
    group, row = _group_of(worker, dependent)
    assert group.args[row] == second_id
    later = _submit(cluster, client, refs=(kept,))
    group, row = _group_of(worker, later)
    assert group.args[row] == second_id
