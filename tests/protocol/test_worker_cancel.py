"""Worker conformance: cancels, releases and suspect tasks (PROTOCOL.md §8, "cancelTasks", "releaseTasks",
"Suspect tasks").

The tests share one worker of each implementation (worker_shared_by_the_module): each reads every outcome of the
tasks it submits, and only those (task ids come from the link's counter, the unknown ones below are used once),
and the worker serves on after each, as after a forced cancel, which the test checks."""

from __future__ import annotations

import pytest

from tests.protocol.conftest import SharedWorker, Worker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import WorkerLink

ATTEMPTS = 5


@pytest.fixture
def worker(worker_shared_by_the_module: SharedWorker) -> Worker:
    return worker_shared_by_the_module.worker


@pytest.fixture
def dialect(worker_shared_by_the_module: SharedWorker) -> Dialect:
    return worker_shared_by_the_module.dialect


def running_task(link: WorkerLink, dialect: Dialect, milliseconds: int) -> int:
    """A sleep_ms task known to be running: a cancel without force was refused for it (§8).

    Whether a task has started is the worker's to say; a cancel that arrives first cancels it instead, and
    then another one is tried, waiting longer before asking.
    """
    for attempt in range(ATTEMPTS):
        task_id, = link.submit(dialect, "sleep_ms", [(milliseconds,)])
        link.pause(0.3 * (attempt + 1))
        link.send("cancelTasks", taskIds=[task_id], force=False)
        others = []
        while True:
            message = link.next()
            if message.member == "cancelRefused" and message.get("taskIds") == [task_id]:
                for other in others:
                    link.keep(other)
                return task_id
            failures = {failure["taskId"]: failure for failure in message.get("failures", [])}
            if message.member == "taskResults" and task_id in failures:
                assert failures[task_id].get("kind") == "canceled", message.fields
                assert not message.get("succeededIds") and len(failures) == 1, message.fields
                break  # it had not started: canceled, as it should be; try again
            others.append(message)  # another task's outcome, for whoever waits for it
        for other in others:
            link.keep(other)
    raise AssertionError(f"no sleep_ms task was seen running in {ATTEMPTS} attempts")


def test_cancel_of_a_running_task_is_refused_and_it_finishes(worker: Worker, dialect: Dialect) -> None:
    """force=false: cancelRefused at once, then the task's normal result."""
    task_id = running_task(worker.link, dialect, 1500)
    outcome = worker.link.outcomes(dialect, [task_id])[task_id]
    assert outcome.succeeded


def test_forced_cancel_stops_a_running_task(worker: Worker, dialect: Dialect) -> None:
    """force=true: the running task is stopped and ends canceled (long before its minute is up); the worker
    then serves on."""
    task_id = running_task(worker.link, dialect, 60_000)
    worker.link.send("cancelTasks", taskIds=[task_id], force=True)
    outcome = worker.link.outcomes(dialect, [task_id], timeout=30)[task_id]
    assert (outcome.succeeded, outcome.kind) == (False, "canceled")
    after, = worker.link.submit(dialect, "echo", [(1,)])
    assert worker.link.outcomes(dialect, [after])[after].value == 1


def test_cancel_of_queued_tasks(worker: Worker, dialect: Dialect) -> None:
    """Tasks that have not started are not run and are reported canceled; no cancelRefused names them."""
    running = running_task(worker.link, dialect, 2000)
    queued = worker.link.submit(dialect, "echo", [(1,), (2,)])
    worker.link.send("cancelTasks", taskIds=queued, force=False)
    outcomes = worker.link.outcomes(dialect, queued + [running])
    assert [outcomes[task_id].kind for task_id in queued] == ["canceled", "canceled"]
    assert outcomes[running].succeeded
    assert not set(queued) & set(worker.link.cancel_refused)


def test_release_gives_back_what_has_not_started(worker: Worker, dialect: Dialect) -> None:
    """releaseTasks: unstarted tasks come back `returned`; the running one stays and finishes."""
    running = running_task(worker.link, dialect, 2000)
    queued = worker.link.submit(dialect, "echo", [(1,), (2,), (3,)])
    worker.link.send("releaseTasks", taskIds=[running, *queued])
    outcomes = worker.link.outcomes(dialect, queued + [running])
    assert [outcomes[task_id].kind for task_id in queued] == ["returned"] * 3
    assert outcomes[running].succeeded


def test_unknown_ids_are_ignored(worker: Worker, dialect: Dialect) -> None:
    """§8 "Input you cannot use": ids the worker does not hold get no answer, and nothing breaks."""
    worker.link.send("cancelTasks", taskIds=[12345], force=False)
    worker.link.send("cancelTasks", taskIds=[12346], force=True)
    worker.link.send("releaseTasks", taskIds=[12347])
    worker.link.send("taskStarted", taskIds=[12348])
    worker.link.send("deleteObjects", objectIds=[b"\x01" * 16])
    assert worker.link.quiet_for(1.0) == []
    task_id, = worker.link.submit(dialect, "echo", [("ok",)])
    assert worker.link.outcomes(dialect, [task_id])[task_id].value == "ok"


def test_a_suspect_task_waits_for_the_schedulers_answer(worker: Worker, dialect: Dialect) -> None:
    """reportStart: the worker says taskStarted and runs the task only after the scheduler's taskStarted."""
    task_id, = worker.link.submit(dialect, "echo", [("suspect",)], report_start=True)
    asked = worker.link.expect("taskStarted")
    assert asked.get("taskIds") == [task_id]
    assert worker.link.quiet_for(1.0) == [], "the suspect ran, or something else came, before the answer"
    worker.link.send("taskStarted", taskIds=[task_id])
    assert worker.link.outcomes(dialect, [task_id])[task_id].value == "suspect"


def test_a_suspect_waiting_for_its_answer_can_be_canceled(worker: Worker, dialect: Dialect) -> None:
    """A suspect that waits for taskStarted has not started: a cancel cancels it."""
    task_id, = worker.link.submit(dialect, "echo", [("suspect",)], report_start=True)
    worker.link.expect("taskStarted")
    worker.link.send("cancelTasks", taskIds=[task_id], force=False)
    outcome = worker.link.outcomes(dialect, [task_id])[task_id]
    assert outcome.kind == "canceled"
    assert task_id not in worker.link.cancel_refused
    worker.link.send("taskStarted", taskIds=[task_id])  # a late answer for a task it no longer holds
    assert worker.link.quiet_for(0.5) == []


def test_a_suspect_waiting_for_its_answer_can_be_released(worker: Worker, dialect: Dialect) -> None:
    task_id, = worker.link.submit(dialect, "echo", [("suspect",)], report_start=True)
    worker.link.expect("taskStarted")
    worker.link.send("releaseTasks", taskIds=[task_id])
    assert worker.link.outcomes(dialect, [task_id])[task_id].kind == "returned"
