"""Scheduler conformance: dispatch, results routing, cancels and a worker's departure (PROTOCOL.md §6-§9),
with the tests playing a worker and clients. Payloads are opaque to the scheduler (§13): plain bytes here."""

from __future__ import annotations

import hashlib
from typing import Callable

import zmq

from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest
from tests.protocol.played_peer import PlayedPeer

StartScheduler = Callable[..., SchedulerUnderTest]
FUNCTION = b"an opaque function payload"
FUNCTION_ID = hashlib.blake2b(FUNCTION, digest_size=16).digest()


def submit(client: PlayedPeer, rows: list[list[bytes]], **group_fields: object) -> list[int]:
    task_ids = client.next_task_ids(len(rows))
    group = {"functionId": FUNCTION_ID, "argsPerTask": len(rows[0]), "taskIds": task_ids,
             "args": [arg for row in rows for arg in row], **group_fields}
    client.send("submitTasks", objects=[{"objectId": FUNCTION_ID, "name": "f", "payload": FUNCTION}], groups=[group])
    return task_ids


def worker_and_client(scheduler_under_test: StartScheduler) -> tuple[SchedulerUnderTest, PlayedPeer, PlayedPeer]:
    """The scheduler under test with one registered worker (capacity 10) and one registered client."""
    scheduler = scheduler_under_test()
    worker = scheduler.peer("worker")
    worker.register("worker", capacity=10)
    client = scheduler.peer("client")
    client.register("client")
    return scheduler, worker, client


def dispatched(worker: PlayedPeer) -> tuple[list[dict], dict[int, list[bytes]], dict]:
    """A submitTasks to a worker: its objects, each task's arguments, and the (single) group's fields."""
    message = worker.expect("submitTasks")
    groups = message.get("groups", [])
    assert len(groups) == 1, groups
    group = groups[0]
    width = group.get("argsPerTask", 0)
    args = group.get("args", [])
    rows = {task_id: args[row * width:(row + 1) * width] for row, task_id in enumerate(group["taskIds"])}
    return message.get("objects", []), rows, group


def test_a_task_goes_to_a_worker_and_its_result_to_its_client(scheduler_under_test: StartScheduler) -> None:
    """§6 dispatch (objects first, the group's arguments unchanged), §7 results back to the client."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    task_ids = submit(client, [[b"one"], [b"two"], [b"three"]])
    objects, rows, group = dispatched(worker)
    assert [(item["objectId"], item.get("payload")) for item in objects] == [(FUNCTION_ID, FUNCTION)]
    assert rows == {task_ids[0]: [b"one"], task_ids[1]: [b"two"], task_ids[2]: [b"three"]}
    assert not group.get("reportStart", False)
    worker.send("taskResults", succeededIds=task_ids[:2], payloads=[b"r1", b"r2"],
                failures=[{"taskId": task_ids[2], "kind": "raised", "typeName": "x.Error", "message": "no"}])
    successes, failures = wire.results_of(client.expect("taskResults"))
    assert successes == {task_ids[0]: b"r1", task_ids[1]: b"r2"}
    assert [(f["taskId"], f.get("kind"), f.get("typeName"), f.get("message")) for f in failures] == [
        (task_ids[2], "raised", "x.Error", "no")
    ]


def test_results_go_only_to_the_client_of_each_task(scheduler_under_test: StartScheduler) -> None:
    scheduler = scheduler_under_test()
    worker = scheduler.peer("worker")
    worker.register("worker", capacity=10)
    first, second = scheduler.peer("client-1"), scheduler.peer("client-2")
    first.register("client")
    second.register("client")
    first_id, = submit(first, [[b"a"]])
    _, rows, _ = dispatched(worker)
    second_id, = submit(second, [[b"b"]])
    _, more, _ = dispatched(worker)
    assert set(rows) | set(more) == {first_id, second_id}
    worker.send("taskResults", succeededIds=[first_id, second_id], payloads=[b"for 1", b"for 2"])
    assert wire.results_of(first.expect("taskResults"))[0] == {first_id: b"for 1"}
    assert wire.results_of(second.expect("taskResults"))[0] == {second_id: b"for 2"}
    assert first.quiet_for(0.3) == [] and second.quiet_for(0.3) == []


def test_large_payloads_reach_the_worker_whole(scheduler_under_test: StartScheduler) -> None:
    """§1: an argument sent as a frame reaches the worker (as a frame of 64 KiB up), byte for byte."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    big = bytes(range(256)) * 400  # 102,400 bytes
    task_id, = client.next_task_ids(1)
    group = {"functionId": FUNCTION_ID, "argsPerTask": 1, "taskIds": [task_id], "args": [b""],
             "argFrameIndices": [0], "argFrames": [1]}
    client.send("submitTasks", [big], objects=[{"objectId": FUNCTION_ID, "payload": FUNCTION}], groups=[group])
    message = worker.expect("submitTasks")
    group = message.get("groups")[0]
    indices, numbers = group.get("argFrameIndices", []), group.get("argFrames", [])
    argument = message.frames[numbers[indices.index(0)]] if 0 in indices else group["args"][0]
    assert argument == big


def test_cancel_of_a_queued_task_and_of_an_unknown_one(scheduler_under_test: StartScheduler) -> None:
    """§9 "Cancel": with no worker, a task is canceled at once; an unknown id is notFound."""
    scheduler = scheduler_under_test()
    client = scheduler.peer("client")
    client.register("client")
    task_id, = submit(client, [[b"x"]])
    client.send("cancelTasks", taskIds=[task_id, (client.id_prefix << 32) | 999], force=False)
    _, failures = wire.results_of(client.expect("taskResults"))
    assert sorted((f["taskId"], f.get("kind")) for f in failures) == [
        (task_id, "canceled"), ((client.id_prefix << 32) | 999, "notFound")
    ]


def test_cancel_of_a_running_task_is_forwarded_and_refused(scheduler_under_test: StartScheduler) -> None:
    """§9: the cancel goes on to the worker; its cancelRefused reaches the client, then the normal result."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    task_id, = submit(client, [[b"x"]])
    dispatched(worker)
    client.send("cancelTasks", taskIds=[task_id], force=True)
    forwarded = worker.expect("cancelTasks")
    assert forwarded.get("taskIds") == [task_id] and forwarded.get("force") is True
    worker.send("cancelRefused", taskIds=[task_id])
    assert client.expect("cancelRefused").get("taskIds") == [task_id]
    worker.send("taskResults", succeededIds=[task_id], payloads=[b"done anyway"])
    assert wire.results_of(client.expect("taskResults"))[0] == {task_id: b"done anyway"}


def test_a_departed_workers_task_goes_to_another_as_a_suspect(scheduler_under_test: StartScheduler) -> None:
    """§8 "Leaving" and "Suspect tasks": requeued with reportStart; started only after the scheduler's answer."""
    scheduler = scheduler_under_test()
    leaving = scheduler.peer("leaving")
    leaving.register("worker", capacity=10)
    client = scheduler.peer("client")
    client.register("client")
    task_id, = submit(client, [[b"x"]])
    dispatched(leaving)
    staying = scheduler.peer("staying")
    staying.register("worker", capacity=10)
    leaving.send("disconnect", reason="leaving")
    objects, rows, group = dispatched(staying)
    assert list(rows) == [task_id] and group.get("reportStart") is True
    assert [item["objectId"] for item in objects] == [FUNCTION_ID]  # a new registration is sent the objects
    staying.send("taskStarted", taskIds=[task_id])
    assert staying.expect("taskStarted").get("taskIds") == [task_id]
    staying.send("taskResults", succeededIds=[task_id], payloads=[b"ok"])
    assert wire.results_of(client.expect("taskResults"))[0] == {task_id: b"ok"}


def test_release_moves_unstarted_tasks(scheduler_under_test: StartScheduler) -> None:
    """§7 `returned`: a task given back goes to the front of the queue and out again, to a worker with room."""
    scheduler = scheduler_under_test("--load-balance-seconds", "0")
    first = scheduler.peer("first")
    first.register("worker", capacity=1)
    client = scheduler.peer("client")
    client.register("client")
    task_id, = submit(client, [[b"x"]])
    dispatched(first)
    second = scheduler.peer("second")
    second.register("worker", capacity=1)
    first.send("taskResults", failures=[{"taskId": task_id, "kind": "returned"}])
    poller = zmq.Poller()
    for worker in (first, second):
        poller.register(worker.socket, zmq.POLLIN)
    ready = dict(poller.poll(30_000))
    assert ready, "a returned task was not dispatched again"
    receiver = first if first.socket in ready else second
    _, rows, _ = dispatched(receiver)
    assert list(rows) == [task_id]
    assert client.quiet_for(0.3) == [], "a returned task is not the client's business"


def task_ids_sent(worker: PlayedPeer, count: int) -> list[int]:
    """The ids of the next `count` tasks sent to the worker, over one or more submitTasks."""
    sent: list[int] = []
    while len(sent) < count:
        for group in worker.expect("submitTasks").get("groups", []):
            sent.extend(group["taskIds"])
    return sent


def test_a_drained_worker_gives_back_its_queue_and_gets_nothing_new(scheduler_under_test: StartScheduler) -> None:
    """§9 Drain: releaseTasks for all it holds, then the answer; what it gives back and what comes later go to
    another worker, and with none, wait for one to join."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    task_ids = submit(client, [[b"a"], [b"b"], [b"c"]])
    assert sorted(task_ids_sent(worker, 3)) == sorted(task_ids)
    client.send("drainWorkers", workerNames=["played worker", "nobody", "played worker"])
    assert sorted(worker.expect("releaseTasks").get("taskIds", [])) == sorted(task_ids)
    answer = client.expect("drainWorkersResponse")
    assert (list(answer.get("draining", [])), list(answer.get("unknown", []))) == (["played worker"], ["nobody"])
    # It had started the first task: it gives back the others, and finishes that one.
    worker.send("taskResults", failures=[{"taskId": task_id, "kind": "returned"} for task_id in task_ids[1:]])
    later = submit(client, [[b"d"]])
    assert [message.member for message in worker.quiet_for(1.0)] == [], "a draining worker was sent work"
    other = scheduler.peer("other")
    other.register("worker", capacity=10)
    assert sorted(task_ids_sent(other, 3)) == sorted(task_ids[1:] + later)
    worker.send("taskResults", succeededIds=task_ids[:1], payloads=[b"r0"])
    assert wire.results_of(client.expect("taskResults"))[0] == {task_ids[0]: b"r0"}


def test_task_output_goes_to_the_client_of_a_task_that_asked(scheduler_under_test: StartScheduler) -> None:
    """§20: a worker's taskOutput for a task it holds that was submitted with streamOutput reaches that task's
    client, named by the worker's hello name, before the task's result; for a task that did not ask, nothing."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    streaming, = submit(client, [[b"a"]], streamOutput=True)
    _, rows, group = dispatched(worker)
    assert set(rows) == {streaming} and group.get("streamOutput", False)
    quiet, = submit(client, [[b"b"]])
    _, rows, group = dispatched(worker)
    assert set(rows) == {quiet} and not group.get("streamOutput", False)
    worker.send("taskOutput", taskIds=[streaming, quiet], streams=[0, 1], texts=["hello\n", "not wanted\n"])
    worker.send("taskResults", succeededIds=[streaming, quiet], payloads=[b"r1", b"r2"])
    output = client.expect("taskOutput")
    assert output.get("taskIds") == [streaming] and output.get("texts") == ["hello\n"]
    assert output.get("streams") == [0] and output.get("worker") == "played worker"
    assert wire.results_of(client.expect("taskResults"))[0] == {streaming: b"r1", quiet: b"r2"}


def test_a_malformed_task_output_is_answered_with_a_protocol_error(scheduler_under_test: StartScheduler) -> None:
    """§3, §20: columns of different lengths, or an unknown stream: protocolError, the worker stays registered."""
    scheduler, worker, client = worker_and_client(scheduler_under_test)
    task_id, = submit(client, [[b"a"]], streamOutput=True)
    dispatched(worker)
    worker.send("taskOutput", taskIds=[task_id], streams=[0, 0], texts=["x\n"])
    assert worker.expect("protocolError").get("reason")
    worker.send("taskOutput", taskIds=[task_id], streams=[9], texts=["x\n"])
    assert worker.expect("protocolError").get("reason")
    worker.send("taskResults", succeededIds=[task_id], payloads=[b"r"])
    assert wire.results_of(client.expect("taskResults"))[0] == {task_id: b"r"}
