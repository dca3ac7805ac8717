"""Scheduler conformance: kept results (TaskGroup.keepResults, PROTOCOL.md §6 and §7 "Kept results"), with the
tests playing a worker and a client. A later group may name a finished kept task in refTaskIds."""

from __future__ import annotations

from typing import Callable

from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest
from tests.protocol.test_scheduler_tasks import FUNCTION_ID, dispatched, submit, worker_and_client

StartScheduler = Callable[..., SchedulerUnderTest]


def kept_result_id(task_id: int) -> bytes:
    """§7: the id under which the scheduler keeps a small kept result."""
    return b"scaler.k" + task_id.to_bytes(8, "big")


def submit_dependent(client, dependency_id: int) -> int:  # noqa: ANN001 - a PlayedPeer
    task_id, = client.next_task_ids(1)
    client.send("submitTasks", groups=[{
        "functionId": FUNCTION_ID, "argsPerTask": 2, "taskIds": [task_id], "args": [b"", b"literal"],
        "refArgIndices": [0], "refTaskIds": [dependency_id],
    }])
    return task_id


def test_a_finished_kept_task_reaches_a_later_task_as_an_object(scheduler_under_test: StartScheduler) -> None:
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    kept_id, = submit(client, [[b"input"]], keepResults=True)
    dispatched(worker)
    worker.send("taskResults", succeededIds=[kept_id], payloads=[b"kept value"])
    assert wire.results_of(client.expect("taskResults"))[0] == {kept_id: b"kept value"}

    dependent_id = submit_dependent(client, kept_id)
    objects, rows, group = dispatched(worker)
    assert rows == {dependent_id: [kept_result_id(kept_id), b"literal"]}
    assert group.get("objectArgIndices") == [0] and not group.get("refTaskIds")
    assert {item["objectId"]: item.get("payload") for item in objects}[kept_result_id(kept_id)] == b"kept value"
    worker.send("taskResults", succeededIds=[dependent_id], payloads=[b"done"])
    assert wire.results_of(client.expect("taskResults"))[0] == {dependent_id: b"done"}

    client.send("deleteObjects", objectIds=[kept_result_id(kept_id)])  # released, and used by nothing now
    assert worker.expect("deleteObjects").get("objectIds") == [kept_result_id(kept_id)]


def test_a_failed_kept_task_fails_its_later_dependents_until_released(scheduler_under_test: StartScheduler) -> None:
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    kept_id, = submit(client, [[b"input"]], keepResults=True)
    dispatched(worker)
    worker.send("taskResults", failures=[{"taskId": kept_id, "kind": "raised", "typeName": "x.Error", "message": "no"}])
    client.expect("taskResults")

    dependent_id = submit_dependent(client, kept_id)
    _, failures = wire.results_of(client.expect("taskResults"))
    assert [(f["taskId"], f.get("kind"), f.get("typeName"), f.get("message")) for f in failures] == [
        (dependent_id, "raised", "x.Error", "no")
    ]
    client.send("deleteObjects", objectIds=[kept_result_id(kept_id)])
    late_id = submit_dependent(client, kept_id)
    _, failures = wire.results_of(client.expect("taskResults"))
    assert [(f["taskId"], f.get("kind")) for f in failures] == [(late_id, "rejected")]
    assert worker.quiet_for(0.3) == []
