"""Lost data is recomputed, not lost (issue 15 point 5): the scheduler core when a store leaves or a reader
cannot fetch an object. Each task still gets exactly one outcome."""

from __future__ import annotations

from scaler.protocol import messages as m
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimulatedCluster

STORE_A = "tcp://10.0.0.1:5000"
STORE_B = "tcp://10.0.0.2:5000"
BIG = 50 * 2**20


def _chain(cluster: SimulatedCluster, client, length: int, quiet_all_but_last: bool = True) -> list[int]:
    """A chain of `length` tasks, each taking the previous one's result."""
    task_ids = client.next_task_ids(length)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
        args=[b"seed"] + [b""] * (length - 1), ref_arg_indices=list(range(1, length)), ref_task_ids=task_ids[:-1],
    )
    function = [] if FUNCTION_ID in client.sent_objects else [
        m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")
    ]
    client.sent_objects.add(FUNCTION_ID)
    cluster.send(client.identity, m.TaskSubmission(
        objects=function, groups=[group], quiet_task_ids=task_ids[:-1] if quiet_all_but_last else [],
    ))
    return task_ids


def _outcome_kinds(client, task_id: int) -> list[str]:
    return [kind for kind, _ in client.outcomes[task_id]]


def test_a_lost_intermediate_is_recomputed_and_its_dependent_waits_for_it() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    cluster.add_store(STORE_B, host_key="host-b")
    client = cluster.add_client()
    worker_a = cluster.add_worker(capacity=1, store=STORE_A)
    first, second, last = _chain(cluster, client, 3)
    cluster.complete_stored(worker_a, [first], holder=STORE_A)
    # `second` is with the worker; a third task keeps waiting for it. Now the store holding `first`'s
    # result leaves while `second` is being fetched: the reader reports it, and `second` comes back.
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    assert cluster.core.counters["tasks_recomputed"] == 1
    cluster.complete(worker_a, task_ids=[second], failure_kind=m.FailureKind.RETURNED)
    assert cluster.core.tasks.records[second].waiting_on == 1  # parked on the rerun of `first`
    assert worker_a.pending == {first: FUNCTION_ID}
    rerun = cluster.complete_stored(worker_a, [first], holder=STORE_B)[first]
    sent = worker_a.submissions()[-1]
    assert sent.groups[0].task_ids == [second] and sent.groups[0].args == [rerun]
    cluster.complete_stored(worker_a, [second], holder=STORE_B)
    cluster.complete(worker_a, task_ids=[last])
    assert _outcome_kinds(client, last) == ["ok"]
    assert _outcome_kinds(client, first) == [] and _outcome_kinds(client, second) == []
    cluster.send(client.identity, m.Disconnect())
    assert cluster.core.objects.stored == {} and cluster.core.lineage.recipes == {}


def test_a_queued_dependent_of_a_lost_result_goes_back_to_waiting_and_runs_after_the_rerun() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    blocker_worker = cluster.add_worker(capacity=1, store=STORE_A)
    first, second = _chain(cluster, client, 2)
    cluster.complete_stored(blocker_worker, [first], holder=STORE_A)
    cluster.complete(blocker_worker, task_ids=[second], failure_kind=m.FailureKind.RETURNED)
    # `second` is queued again (returned) and the worker is told of it again; drop the worker so it waits.
    cluster.forget_worker(blocker_worker)
    cluster.send(blocker_worker.identity, m.Disconnect())
    assert cluster.core.unassigned_count == 1
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    assert cluster.core.unassigned_count == 1  # the rerun of `first`, not `second`
    assert cluster.core.tasks.records[second].waiting_on == 1
    cluster.add_store(STORE_B)
    worker = cluster.add_worker(capacity=2, store=STORE_B)
    assert list(worker.pending) == [first]
    cluster.complete_stored(worker, [first], holder=STORE_B)
    cluster.complete(worker, task_ids=[second])
    assert _outcome_kinds(client, second) == ["ok"]


def test_a_result_the_client_has_not_fetched_is_recomputed_and_delivered_again_once() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    cluster.add_store(STORE_B)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    [task_id] = cluster.submit(client, 1)
    first_id = cluster.complete_stored(worker, [task_id], holder=STORE_A)[task_id]
    # The client's fetch fails: it reports the object lost, then lets go of it (its release comes after).
    cluster.send(client.identity, m.ObjectsLost(object_ids=[first_id]))
    cluster.send(client.identity, m.DeleteObjects(object_ids=[first_id]))
    assert store_a.received(m.DeleteObjects)[-1].object_ids == [first_id]
    assert list(worker.pending) == [task_id]
    second_id = cluster.complete_stored(worker, [task_id], holder=STORE_B)[task_id]
    assert [stored.object_id for _, stored in client.outcomes[task_id]] == [first_id, second_id]
    assert first_id not in cluster.core.objects.stored
    assert cluster.core.objects.stored[second_id].owners == {client.identity}


def test_a_chain_whose_intermediates_were_freed_is_recomputed_from_its_recipes() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    cluster.add_store(STORE_B)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=1, store=STORE_A)
    first, second, third = _chain(cluster, client, 3)
    cluster.complete_stored(worker, [first], holder=STORE_A)
    cluster.complete_stored(worker, [second], holder=STORE_A)
    last_id = cluster.complete_stored(worker, [third], holder=STORE_A)[third]
    # The intermediates were freed once used; the final result waits for its client to fetch it.
    assert set(cluster.core.objects.stored) == {FUNCTION_ID, last_id}
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    for task_id in (first, second, third):
        assert list(worker.pending) == [task_id]
        cluster.complete_stored(worker, [task_id], holder=STORE_B)
    assert _outcome_kinds(client, third) == ["stored", "stored"]
    assert cluster.core.counters["tasks_recomputed"] == 3


def test_a_lost_client_object_is_asked_for_again_and_its_tasks_wait_for_it() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    cluster.add_store(STORE_B)
    client = cluster.add_client()
    big = m.ObjectPayload(object_id=b"o" * 16, payload=b"", name="big", size=BIG, holder=STORE_A)
    task_ids = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids, args=[big.object_id] * 2,
        object_arg_indices=[0, 1],
    )
    cluster.send(client.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"), big], groups=[group]
    ))
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    assert client.received(m.ResendObjects)[-1].object_ids == [big.object_id]
    worker = cluster.add_worker(store=STORE_B)
    assert worker.pending == {}  # nothing runs without its object
    cluster.send(client.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=big.object_id, payload=b"", name="big", size=BIG, holder=STORE_B)],
        groups=[],
    ))
    assert set(worker.pending) == set(task_ids)
    shipped = [item for sub in worker.submissions() for item in sub.objects if item.object_id == big.object_id]
    assert [item.holder for item in shipped] == [STORE_B]
    cluster.complete(worker)
    assert all(_outcome_kinds(client, task_id) == ["ok"] for task_id in task_ids)


def test_tasks_fail_naming_the_object_when_its_client_cannot_send_it_again() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    big = m.ObjectPayload(object_id=b"p" * 16, payload=b"", name="big", size=BIG, holder=STORE_A)
    [task_id, dependent] = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[task_id, dependent],
        args=[big.object_id, b""], object_arg_indices=[0], ref_arg_indices=[1], ref_task_ids=[task_id],
    )
    cluster.send(client.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"), big], groups=[group]
    ))
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    cluster.send(client.identity, m.ObjectsLost(object_ids=[big.object_id]))
    for failed in (task_id, dependent):
        [(kind, failure)] = client.outcomes[failed]
        assert kind == "failed" and failure.type_name == "scaler.errors.ObjectLostError"
        assert big.object_id.hex() in failure.message


def test_a_lost_result_without_a_recipe_fails_its_waiting_dependents_once() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=1, store=STORE_A)
    first, second = _chain(cluster, client, 2)
    object_id = cluster.complete_stored(worker, [first], holder=STORE_A)[first]
    cluster.core.lineage.recipes.pop(object_id)  # as if the recipe bound had been reached
    cluster.core.lineage.input_refs.clear()
    cluster.complete(worker, task_ids=[second], failure_kind=m.FailureKind.RETURNED)
    cluster.forget_worker(worker)
    cluster.send(worker.identity, m.Disconnect())
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    [(kind, failure)] = client.outcomes[second]
    assert kind == "failed" and "lineage was not kept" in failure.message


def test_an_unneeded_lost_result_is_simply_forgotten() -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(STORE_A)
    client = cluster.add_client()
    worker = cluster.add_worker(store=STORE_A)
    [task_id] = cluster.submit(client, 1)
    object_id = cluster.complete_stored(worker, [task_id], holder=STORE_A)[task_id]
    cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))  # fetched and released
    cluster.send(store_a.identity, m.Disconnect(reason="killed"))
    assert cluster.core.counters["tasks_recomputed"] == 0 and worker.pending == {}
    assert cluster.core.lineage.recipes == {} and cluster.core.lineage.lost == {}


def test_the_client_raises_object_lost_error_for_the_schedulers_failure() -> None:
    from scaler.client.future import exception_from_failure
    from scaler.errors import ObjectLostError
    from scaler.scheduler.core.object_lifetime.lineage import lost_failure

    error = exception_from_failure(lost_failure(1, b"q" * 16, "no client could send it again"))
    assert isinstance(error, ObjectLostError) and (b"q" * 16).hex() in str(error)
