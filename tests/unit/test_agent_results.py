"""The worker agent's handling of results, on its sans-I/O core with simulated processors (agent_harness.py):
results over the size limits, and results a processor keeps unwritten until they are asked for."""

from __future__ import annotations

import logging
import pickle

import pytest
from agent_harness import SimulatedAgent, make_agent, of_type

from scaler.errors import PayloadTooLargeError
from scaler.protocol import messages as m
from scaler.worker.agent_actions import SignalProcessor, StopProcessor
from scaler.worker.processor_pool import SPARE_IDLE_SECONDS


@pytest.fixture
def agent() -> SimulatedAgent:
    return make_agent()


# ---------------------------------------------------------------------------------------------- size limits


def test_a_result_over_the_frame_limit_fails_as_payload_too_large_and_the_others_go_through(
    agent: SimulatedAgent, caplog: pytest.LogCaptureFixture
) -> None:
    agent.welcome(max_frame_bytes=10_000)
    big, small = agent.submit(2)
    results = m.TaskResults(succeeded_ids=[big, small], payloads=[b"x" * 20_000, b"ok"], failures=[])
    with caplog.at_level(logging.WARNING):
        agent.answer_batch(agent.active(), results)
    failure = agent.failures(m.FailureKind.RAISED)[big]
    assert failure.type_name == "scaler.errors.PayloadTooLargeError" and "20,000 bytes" in failure.message
    assert isinstance(pickle.loads(failure.exception), PayloadTooLargeError)
    assert agent.outcomes[small] == [("ok", b"ok")]
    assert "1 failed as too large" in caplog.text
    agent.check()


def test_a_result_exactly_at_the_frame_limit_fails_too_and_one_byte_under_goes_through(agent: SimulatedAgent) -> None:
    agent.welcome(max_frame_bytes=10_000)
    at_limit, under = agent.submit(2)
    results = m.TaskResults(succeeded_ids=[at_limit, under], payloads=[b"x" * 10_000, b"y" * 9_999], failures=[])
    agent.answer_batch(agent.active(), results)
    failure = agent.failures(m.FailureKind.RAISED)[at_limit]
    assert failure.type_name == "scaler.errors.PayloadTooLargeError"
    assert "10,000 bytes, at the scheduler's limit of 10,000 bytes" in failure.message
    assert agent.outcomes[under] == [("ok", b"y" * 9_999)]
    agent.check()


def test_results_over_the_control_limit_go_in_parts_each_with_its_tasks_warnings(agent: SimulatedAgent) -> None:
    agent.welcome(max_control_frame_bytes=2_000)
    task_ids = agent.submit(20)
    processor = agent.active()
    warnings = [
        m.TaskWarning(task_id=task_id, category="builtins.UserWarning", message="w" * 100, filename="f.py", lineno=1)
        for task_id in task_ids
    ]
    results = m.TaskResults(
        succeeded_ids=task_ids, payloads=[b"p" * 200 for _ in task_ids], failures=[], warnings=warnings
    )
    agent.answer_batch(processor, results)
    parts = agent.received(m.TaskResults)
    assert len(parts) > 1
    assert all(len(m.encode(part)[0]) <= 2_000 for part in parts)
    for part in parts:
        assert {warning.task_id for warning in part.warnings} == set(part.succeeded_ids)
    assert sorted(task_id for part in parts for task_id in part.succeeded_ids) == task_ids
    agent.check()


# ---------------------------------------------------------------------------------------------- results kept unwritten


LARGE = b"L" * 16
STORE = "tcp://127.0.0.1:2"


def _made_stored(agent: SimulatedAgent, processor, object_id: bytes) -> int:
    """The processor's running task ends with a large result it reports as stored (and may not have written)."""
    task_id = processor.running
    assert task_id is not None
    processor.running = None
    agent.slots.pop(processor.identity, None)
    agent._from_processor(processor, m.TaskResults(succeeded_ids=[], payloads=[], failures=[], stored=[
        m.StoredResult(task_id=task_id, object_id=object_id, size=1 << 20, holder=STORE)
    ]))
    return task_id


def test_a_publish_request_goes_to_the_processor_that_made_the_result_signalled_while_its_task_runs(
    agent: SimulatedAgent,
) -> None:
    agent.submit(2)
    maker = agent.run_next()
    _made_stored(agent, maker, LARGE)
    agent.run_next()  # busy with the next task: only the signal makes it read now
    actions = agent.from_scheduler(m.PublishObjects(object_ids=[LARGE]))
    assert [signal.identity for signal in of_type(actions, SignalProcessor)] == [maker.identity]
    assert maker.received_of(m.PublishObjects) == [m.PublishObjects(object_ids=[LARGE])]
    assert agent.from_scheduler(m.PublishObjects(object_ids=[LARGE])) == [], "asked once"
    agent.check()


def test_a_result_given_to_another_processor_of_the_worker_is_published_by_its_maker(agent: SimulatedAgent) -> None:
    first, second = agent.submit(2)
    maker = agent.run_next(first)
    _made_stored(agent, maker, LARGE)
    agent.run_next(second)
    agent.block(maker)  # its task waits on nested tasks: another processor serves the next submissions
    agent.hello()
    assert agent.active() is not maker
    agent.submit(1, objects=[m.ObjectPayload(object_id=LARGE, payload=b"", name="result", size=1 << 20,
                                             holder=STORE)])
    assert maker.received_of(m.PublishObjects) == [m.PublishObjects(object_ids=[LARGE])]
    agent.check()


def test_a_processor_that_dies_reports_the_results_it_may_not_have_written_as_lost(agent: SimulatedAgent) -> None:
    agent.submit(2)
    maker = agent.run_next()
    _made_stored(agent, maker, LARGE)
    agent.run_next()
    agent.crash(maker)
    assert m.ObjectsLost(object_ids=[LARGE]) in agent.received(m.ObjectsLost)
    agent.check()


def test_spares_stopped_after_idling_report_the_results_they_may_not_have_written_as_lost(
    agent: SimulatedAgent,
) -> None:
    agent.submit(3)
    first, _ = agent.wait_in_active()
    second, _ = agent.wait_in_active()
    made = {}
    for processor, object_id in ((second, b"S" * 16), (first, b"F" * 16)):
        agent.unblock(processor)
        _made_stored(agent, processor, object_id)
        made[processor.identity] = object_id
    agent.tick(SPARE_IDLE_SECONDS / 2)
    assert not agent.received(m.ObjectsLost)
    stopped = {stop.identity for stop in of_type(agent.tick(SPARE_IDLE_SECONDS), StopProcessor)}
    lost = {object_id for message in agent.received(m.ObjectsLost) for object_id in message.object_ids}
    assert lost and lost == {made[identity] for identity in stopped if identity in made}
    agent.check()
