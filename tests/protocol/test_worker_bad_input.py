"""Worker conformance: input a worker cannot use, and what it must still do (PROTOCOL.md §1, §8 "Input you
cannot use"). The scheduler never sends such input; a worker that meets it logs it, keeps its registration,
and serves on.

So the tests share one worker of each implementation (worker_shared_by_the_module): each leaves it serving,
which it checks, with every answer it caused read, and reads only the answers to its own task ids."""

from __future__ import annotations

import pytest

from tests.protocol import wire
from tests.protocol.conftest import SharedWorker, Worker
from tests.protocol.dialects import Dialect, content_id
from tests.protocol.fake_scheduler import WorkerLink

# Neither a pickle nor msgpack: 0xc1 is the one byte msgpack never uses, and no pickle starts with it.
UNREADABLE = b"\xc1 neither pickle nor msgpack"


@pytest.fixture
def worker(worker_shared_by_the_module: SharedWorker) -> Worker:
    return worker_shared_by_the_module.worker


@pytest.fixture
def dialect(worker_shared_by_the_module: SharedWorker) -> Dialect:
    return worker_shared_by_the_module.dialect


def assert_serves(link: WorkerLink, dialect: Dialect) -> None:
    """Still registered and working: it runs a task and keeps heartbeating."""
    task_id, = link.submit(dialect, "add", [(20, 22)])
    assert link.outcomes(dialect, [task_id])[task_id].value == 42
    link.wait_heartbeats(len(link.heartbeats) + 1)


def _valid_cancel() -> bytes:
    return wire.build("cancelTasks", taskIds=[1], force=False)


UNDECODABLE = {
    "garbage": [b"this is not a capnp message at all!!!!!!"],
    "empty_frame": [b""],
    "truncated": [_valid_cancel()[:-8]],
    "not_whole_words": [_valid_cancel() + b"\x00\x00\x00"],
    "unknown_member": [wire.with_discriminant(_valid_cancel(), 99)],
    "unnamed_payload_frame": [_valid_cancel(), b"a frame no field names"],
}


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_an_undecodable_message_is_dropped(worker: Worker, dialect: Dialect, case: str) -> None:
    worker.link.send_frames(UNDECODABLE[case])
    assert worker.link.quiet_for(0.5) == []
    assert worker.process.process.poll() is None, "the worker exited"
    assert_serves(worker.link, dialect)


def test_a_submission_with_wrong_frames_is_dropped_whole(worker: Worker, dialect: Dialect) -> None:
    """§1: argFrames naming a frame that is not there make the whole message malformed: none of its tasks
    runs, and no outcome is owed for them."""
    payload = dialect.function("echo")
    group = {
        "functionId": content_id(payload), "argsPerTask": 1, "taskIds": [99, 100], "args": [b"", b""],
        "argFrameIndices": [0, 1], "argFrames": [1, 2],
    }
    frame = wire.build("submitTasks", objects=[{"objectId": content_id(payload), "payload": payload}], groups=[group])
    worker.link.send_frames([frame, dialect.encode("only one frame")])
    assert worker.link.quiet_for(1.0) == []
    assert_serves(worker.link, dialect)
    assert not {99, 100} & set(worker.link.answered)


@pytest.mark.parametrize("member", ["hello", "heartbeat", "clearRequest", "shutdownRequest", "cancelRefused"])
def test_a_member_a_worker_never_receives_is_ignored(worker: Worker, dialect: Dialect, member: str) -> None:
    worker.link.send(member)
    assert worker.link.quiet_for(0.5) == []
    assert_serves(worker.link, dialect)


def test_a_protocol_error_is_only_logged(worker: Worker, dialect: Dialect) -> None:
    worker.link.send("protocolError", reason="something the worker sent was wrong")
    assert worker.link.quiet_for(0.5) == []
    assert_serves(worker.link, dialect)


def test_a_function_never_sent_fails_the_task(worker: Worker, dialect: Dialect) -> None:
    """A group naming an object the worker does not hold: each task fails with `serialization`. (A function
    name no test sends: the worker is shared, and the others send `add`.)"""
    task_ids = worker.link.submit(dialect, "never_sent", [(1, 2), (3, 4)], send_function=False)
    outcomes = worker.link.outcomes(dialect, task_ids)
    assert [outcome.kind for outcome in outcomes.values()] == ["serialization"] * 2
    assert_serves(worker.link, dialect)


def test_a_deleted_object_is_gone(worker: Worker, dialect: Dialect) -> None:
    """deleteObjects drops the object: a task that names it afterwards fails with `serialization`."""
    object_id = b"D" * 16
    worker.link.send_object(object_id, dialect.encode(5))
    before, = worker.link.submit(dialect, "add", [(None, 1)], object_args={0: object_id})
    assert worker.link.outcomes(dialect, [before])[before].value == 6
    worker.link.send("deleteObjects", objectIds=[object_id])
    after, = worker.link.submit(dialect, "add", [(None, 1)], object_args={0: object_id})
    assert worker.link.outcomes(dialect, [after])[after].kind == "serialization"


def test_an_unreadable_function_or_argument_fails_with_serialization(worker: Worker, dialect: Dialect) -> None:
    function_id = content_id(UNREADABLE)
    group = {"functionId": function_id, "argsPerTask": 0, "taskIds": [501]}
    worker.link.send("submitTasks", objects=[{"objectId": function_id, "payload": UNREADABLE}], groups=[group])
    echo = dialect.function("echo")
    group = {"functionId": content_id(echo), "argsPerTask": 1, "taskIds": [502], "args": [UNREADABLE]}
    worker.link.send("submitTasks", objects=[{"objectId": content_id(echo), "payload": echo}], groups=[group])
    outcomes = worker.link.outcomes(dialect, [501, 502])
    assert [outcome.kind for outcome in outcomes.values()] == ["serialization", "serialization"]
    assert all(outcome.message for outcome in outcomes.values())
    assert_serves(worker.link, dialect)
