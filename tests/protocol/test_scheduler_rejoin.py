"""Scheduler conformance: what a restarted scheduler does with a rejoining worker's re-announcement and the
results it held back, and with its client's re-submission (PROTOCOL.md §21, §4 "Resuming after a restart").
The tests play the worker and the client from DEALER sockets."""

from __future__ import annotations

from typing import Callable

from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest
from tests.protocol.played_peer import PlayedPeer
from tests.protocol.test_scheduler_tasks import FUNCTION, FUNCTION_ID
from tests.protocol.test_scheduler_versions import hello

StartScheduler = Callable[..., SchedulerUnderTest]
OLD_PREFIX = 0x5A5A0002  # a client's id prefix given by a scheduler before this one


def rejoined_worker(scheduler: SchedulerUnderTest, held_results: dict[int, bytes], holds: list[int]) -> PlayedPeer:
    """A worker back after a restart: hello{rejoining}, then the results it held, then its reannounce (§21)."""
    worker = scheduler.peer("rejoining worker")
    assert hello(worker, "worker", rejoining=True).member == "welcome"
    if held_results:
        worker.send("taskResults", succeededIds=list(held_results), payloads=list(held_results.values()))
    worker.send("reannounce", taskIds=holds)
    return worker


def resumed_client(scheduler: SchedulerUnderTest, task_ids: list[int]) -> PlayedPeer:
    """The client of those tasks, resuming under its prefix and sending them again under their ids (§4)."""
    client = scheduler.peer("resuming client")
    welcome = hello(client, "client", idPrefix=OLD_PREFIX)
    assert welcome.member == "welcome" and welcome.get("idPrefix") == OLD_PREFIX, welcome.fields
    client.send("submitTasks", objects=[{"objectId": FUNCTION_ID, "name": "f", "payload": FUNCTION}], groups=[
        {"functionId": FUNCTION_ID, "argsPerTask": 1, "taskIds": task_ids, "args": [b"x"] * len(task_ids)},
    ])
    return client


def test_a_result_held_across_the_restart_completes_the_resubmitted_task_without_running_it(
    scheduler_under_test: StartScheduler,
) -> None:
    """§21: a result the worker sends before its reannounce, for a task this scheduler never saw, is kept;
    the client's re-submission under the same id completes from it, and no worker gets the task."""
    scheduler = scheduler_under_test()
    task_id = (OLD_PREFIX << 32) | 1
    worker = rejoined_worker(scheduler, {task_id: b"held result"}, holds=[])
    client = resumed_client(scheduler, [task_id])
    results = client.expect("taskResults")
    assert wire.results_of(results)[0] == {task_id: b"held result"}
    assert [message.member for message in worker.quiet_for(1.0)] == []


def test_a_reannounced_task_is_not_run_again_and_its_later_result_reaches_the_client(
    scheduler_under_test: StartScheduler,
) -> None:
    """§21: a task the worker re-announced stays where it runs when its client sends it again."""
    scheduler = scheduler_under_test()
    task_id = (OLD_PREFIX << 32) | 2
    worker = rejoined_worker(scheduler, {}, holds=[task_id])
    client = resumed_client(scheduler, [task_id])
    assert [message.member for message in worker.quiet_for(1.0)] == []
    worker.send("taskResults", succeededIds=[task_id], payloads=[b"ran once"])
    assert wire.results_of(client.expect("taskResults"))[0] == {task_id: b"ran once"}
