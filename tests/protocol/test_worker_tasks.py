"""Worker conformance: a task's life, results in batches, payload frames, objects, profiles and the heartbeat's
count of held tasks (PROTOCOL.md §1, §6, §7, §8)."""

from __future__ import annotations

import os

import pytest

from tests.protocol import wire
from tests.protocol.conftest import StartWorker, Worker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import FakeScheduler


def test_a_task_runs_and_its_result_comes_back(worker: Worker, dialect: Dialect) -> None:
    """§8 "Running a task": function and arguments decoded, result encoded, one outcome per task."""
    task_ids = worker.link.submit(dialect, "add", [(1, 2), (40, 2), (-5, 5)])
    outcomes = worker.link.outcomes(dialect, task_ids)
    assert [outcomes[task_id].value for task_id in task_ids] == [3, 42, 0]


def test_keywords_are_the_last_arguments_of_a_row(worker: Worker, dialect: Dialect) -> None:
    """§6: the last len(keywords) arguments of each row go by keyword: add(1, b=2), then add(a=3, b=4)."""
    first = worker.link.submit(dialect, "add", [(1, 2)], keywords=("b",))
    second = worker.link.submit(dialect, "add", [(3, 4)], keywords=("a", "b"))
    outcomes = worker.link.outcomes(dialect, first + second)
    assert [outcome.value for outcome in outcomes.values()] == [3, 7]


def test_a_function_that_raises_is_reported_raised(worker: Worker, dialect: Dialect) -> None:
    """§7: kind raised, a dotted type name and the message; the worker serves on."""
    failed, = worker.link.submit(dialect, "fail", [("boom at task 1",)])
    outcome = worker.link.outcomes(dialect, [failed])[failed]
    assert not outcome.succeeded and outcome.kind == "raised"
    assert "." in outcome.type_name and "boom at task 1" in outcome.message
    after, = worker.link.submit(dialect, "echo", [("still here",)])
    assert worker.link.outcomes(dialect, [after])[after].value == "still here"


def test_results_come_back_in_batches(worker: Worker, dialect: Dialect) -> None:
    """§8 "Results": many quick tasks are answered in fewer messages than tasks, each task exactly once."""
    task_ids = worker.link.submit(dialect, "echo", [(index,) for index in range(500)])
    outcomes = worker.link.outcomes(dialect, task_ids)
    assert [outcomes[task_id].value for task_id in task_ids] == list(range(500))
    sizes = [len(message.get("succeededIds", [])) for message in worker.link.result_messages]
    assert max(sizes) > 1, f"every result came in a message of its own: {sizes}"


def test_large_arguments_and_results_travel_as_frames(worker: Worker, dialect: Dialect) -> None:
    """§1: an argument sent as a payload frame is read; a result of 64 KiB or more comes back whole (as the
    Python peers send it, in a frame of its own)."""
    big = os.urandom(200_000)
    task_id, = worker.link.submit(dialect, "echo", [(big,)])
    assert worker.link.outcomes(dialect, [task_id])[task_id].value == big
    message = worker.link.result_messages[-1]
    assert message.get("payloadFrames"), "a 200 kB result inline: the Python peers move payloads of 64 KiB up to frames"


def test_object_arguments(worker: Worker, dialect: Dialect) -> None:
    """§6: an argument in objectArgIndices is the id of an object sent earlier (inline or as a frame); the worker
    passes the object's value."""
    small_id, large_id = b"S" * 16, b"L" * 16
    large = os.urandom(100_000)
    worker.link.send_object(small_id, dialect.encode(20))
    worker.link.send_object(large_id, dialect.encode(large), as_frame=True)
    added, = worker.link.submit(dialect, "add", [(None, 22)], object_args={0: small_id})
    echoed, = worker.link.submit(dialect, "echo", [(None,)], object_args={0: large_id})
    outcomes = worker.link.outcomes(dialect, [added, echoed])
    assert outcomes[added].value == 42
    assert outcomes[echoed].value == large


def test_profiled_tasks_come_with_their_profile(worker: Worker, dialect: Dialect) -> None:
    """§7 "Profiles": a group with profiling=true gets a TaskProfile per successful task, in the same message."""
    task_ids = worker.link.submit(dialect, "sleep_ms", [(30,), (30,)], profiling=True)
    worker.link.outcomes(dialect, task_ids)
    profiles = [profile for message in worker.link.result_messages for profile in message.get("profiles", [])]
    assert sorted(profile["taskId"] for profile in profiles) == task_ids
    assert all(profile.get("durationUs", 0) >= 20_000 for profile in profiles)


def test_heartbeats_count_the_tasks_held(worker: Worker, dialect: Dialect) -> None:
    """§5: queuedTasks counts the tasks received and not yet answered, running ones included."""
    task_ids = worker.link.submit(dialect, "sleep_ms", [(3000,), (1,), (1,)])
    seen_before = len(worker.link.heartbeats)
    worker.link.wait_heartbeats(seen_before + 2)
    assert worker.link.heartbeats[-1][1].get("queuedTasks", 0) == 3
    worker.link.outcomes(dialect, task_ids)
    seen_after = len(worker.link.heartbeats)
    worker.link.wait_heartbeats(seen_after + 2)
    assert worker.link.heartbeats[-1][1].get("queuedTasks", 0) == 0


def test_capacity_is_what_the_hello_offers(start: StartWorker, scheduler: FakeScheduler, dialect: Dialect) -> None:
    """§8 "Capacity": the worker accepts every task it is sent, even beyond its capacity, and answers each."""
    start(capacity=2)
    link = scheduler.accept()
    link.welcome()
    assert link.hello.get("capacity") == 2
    task_ids = link.submit(dialect, "echo", [(index,) for index in range(10)])
    assert len(link.outcomes(dialect, task_ids)) == 10


def test_every_outcome_in_a_valid_message(worker: Worker, dialect: Dialect) -> None:
    """§1, §7: every message the worker sends decodes under the decoding limits, and its frames all match."""
    task_ids = worker.link.submit(dialect, "echo", [(os.urandom(70_000),), (b"small",), (None,)])
    worker.link.outcomes(dialect, task_ids)
    for message in worker.link.result_messages:
        wire.results_of(message)  # asserts the frame bookkeeping


def test_a_group_asking_for_output_runs_as_any_other(worker: Worker, dialect: Dialect) -> None:
    """§20: streamOutput is optional for a worker (the native one ignores it); whatever taskOutput it sends names
    only tasks of that group, with known streams and whole lines, and comes before the task's result."""
    task_ids = worker.link.submit(dialect, "echo", [("a",), ("b",)], stream_output=True)
    answered: set[int] = set()
    deadline_messages = 100
    while answered != set(task_ids) and deadline_messages:
        deadline_messages -= 1
        message = worker.link.next()
        if message.member == "taskOutput":
            assert set(message.get("taskIds", [])) <= set(task_ids) - answered, "output after the task's result"
            assert set(message.get("streams", [])) <= {0, 1, 2}
            assert all(text.endswith("\n") for text in message.get("texts", []))
            continue
        assert message.member == "taskResults", f"expected taskResults, got {message.member}: {message.fields}"
        successes, failures = wire.results_of(message)
        assert not failures
        assert {dialect.decode(payload) for payload in successes.values()} <= {"a", "b"}
        answered.update(successes)
    assert answered == set(task_ids)


def test_results_say_how_long_their_tasks_ran(worker: Worker, dialect: Dialect, implementation) -> None:
    """§7 "Run time": ranTasks counts the tasks that ran (succeeded or raised), runSeconds their running time in
    all; the scheduler sizes the worker's queue by it. Optional on the wire; the Python and native workers send it."""
    task_ids = worker.link.submit(dialect, "sleep_ms", [(30,), (30,)])
    failed = worker.link.submit(dialect, "fail", [("boom",)])
    worker.link.outcomes(dialect, task_ids + failed)
    ran = sum(message.get("ranTasks", 0) for message in worker.link.result_messages)
    seconds = sum(message.get("runSeconds", 0.0) for message in worker.link.result_messages)
    if implementation.name not in ("python", "native") and ran == 0:
        pytest.skip(f"{implementation.name} does not report run time (optional)")
    assert ran == 3
    assert seconds >= 0.055, f"two tasks of 30 ms ran {seconds:.3f} s in all"
