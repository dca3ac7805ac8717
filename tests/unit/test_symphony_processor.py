"""The Symphony worker's processor (scaler/adapters/symphony/symphony_processor.py): what it answers the agent's
core for cancels, releases and Symphony's outcomes. The Symphony session is a stand-in recording what is sent."""

from __future__ import annotations

from typing import Any

import cloudpickle
import pytest

from scaler.adapters.symphony.symphony_processor import SymphonyProcessor
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.utility import blocking

FUNCTION_ID = b"f" * 32


class Session:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> str:
        self.sent.append(payload)
        return f"symphony-{len(self.sent)}"


def processor_with_tasks(task_ids: list[int], base_concurrency: int = 1) -> tuple[SymphonyProcessor, Session]:
    session = Session()
    processor = SymphonyProcessor("test", base_concurrency, session)  # type: ignore[arg-type]
    serializer = DefaultSerializer()
    processor.on_frames(m.encode(m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=FUNCTION_ID, payload=serializer.serialize(pow))],
        groups=[m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=2, keywords=(), task_ids=task_ids,
            args=[serializer.serialize(value) for task_id in task_ids for value in (task_id, 2)],
        )],
    )))
    processor.pump(0.0)
    return processor, session


def results(messages: list[m.Message]) -> tuple[list[int], dict[int, m.FailureKind], list[int]]:
    """(succeeded ids, failure kind by id, refused ids) in the processor's messages."""
    succeeded: list[int] = []
    failed: dict[int, m.FailureKind] = {}
    refused: list[int] = []
    for message in messages:
        if isinstance(message, m.TaskResults):
            succeeded.extend(message.succeeded_ids)
            failed.update((failure.task_id, failure.kind) for failure in message.failures)
        elif isinstance(message, m.CancelRefused):
            refused.extend(message.task_ids)
    return succeeded, failed, refused


def outcome(value: Any) -> bytes:
    return cloudpickle.dumps(value)


def test_a_task_runs_in_symphony_and_its_result_goes_back_serialized_with_the_clients_serializer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The call sets the nesting depth a Client made inside the task reads: here, in the test's own process.
    monkeypatch.setenv("SCALER_NESTING_DEPTH", "0")
    monkeypatch.setattr(blocking, "_nesting_depth", blocking.client_nesting_depth())
    processor, session = processor_with_tasks([1])
    call, *args = cloudpickle.loads(session.sent[0])
    assert call(*args) == 1
    processor.on_outcome("symphony-1", outcome(1), None)
    [message] = processor.take_messages()
    assert isinstance(message, m.TaskResults) and message.succeeded_ids == [1]
    assert DefaultSerializer.deserialize(message.payloads[0]) == 1


def test_a_cancel_stops_a_queued_task_and_is_refused_for_one_in_symphony() -> None:
    processor, session = processor_with_tasks([1, 2])  # base concurrency 1: task 1 in Symphony, task 2 queued
    processor.on_frames(m.encode(m.CancelTasks(task_ids=[1, 2], force=False)))
    assert results(processor.take_messages()) == ([], {2: m.FailureKind.CANCELED}, [1])
    processor.on_outcome("symphony-1", outcome(1), None)
    assert results(processor.take_messages())[0] == [1]
    assert len(session.sent) == 1


def test_a_forced_cancel_ends_a_task_in_symphony_at_once_and_drops_its_later_outcome() -> None:
    processor, _ = processor_with_tasks([1])
    processor.on_frames(m.encode(m.CancelTasks(task_ids=[1], force=True)))
    assert results(processor.take_messages()) == ([], {1: m.FailureKind.CANCELED}, [])
    processor.on_outcome("symphony-1", outcome(1), None)
    assert processor.take_messages() == []


def test_a_release_gives_back_only_the_tasks_not_in_symphony() -> None:
    processor, session = processor_with_tasks([1, 2, 3])
    processor.on_frames(m.encode(m.ReleaseTasks(task_ids=[1, 2, 3])))
    assert results(processor.take_messages()) == ([], {2: m.FailureKind.RETURNED, 3: m.FailureKind.RETURNED}, [])
    processor.pump(0.0)
    assert len(session.sent) == 1


def test_an_error_raised_in_symphony_fails_its_task_with_that_error() -> None:
    processor, _ = processor_with_tasks([1])
    processor.on_outcome("symphony-1", None, ValueError("no"))
    [message] = processor.take_messages()
    assert isinstance(message, m.TaskResults)
    [failure] = message.failures
    assert failure.kind is m.FailureKind.RAISED and failure.type_name == "builtins.ValueError"
    assert isinstance(cloudpickle.loads(failure.exception), ValueError)
