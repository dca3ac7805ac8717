"""The worker agent's decisions, tested on its sans-I/O core with simulated processors (agent_harness.py):
tasks and their results, nested waits, limits, crash blame, suspects, heartbeats and leaving. Cancels and
releases are in test_agent_cancels.py, result sizes and results kept unwritten in test_agent_results.py.

No process, socket or clock: each test plays the scheduler and the processors, and checks what the
agent sends where, and which processes it starts, stops and signals.
"""

from __future__ import annotations

import logging
import pickle

import pytest
from agent_harness import FUNCTION_ID, SimulatedAgent, make_agent, of_type

from scaler.errors import MemoryLimitError, TaskTimeoutError
from scaler.protocol import messages as m
from scaler.worker.agent_actions import Exit, StartProcessor, StopProcessor
from scaler.worker.config import WorkerConfig
from scaler.worker.processor_pool import SPARE_IDLE_SECONDS

ADDRESS = "tcp://127.0.0.1:1"

@pytest.fixture
def agent() -> SimulatedAgent:
    return make_agent()


# ---------------------------------------------------------------------------------------------- start and tasks


def test_the_agent_starts_one_processor_and_says_hello_with_its_capacity() -> None:
    agent = SimulatedAgent(WorkerConfig(address=ADDRESS, task_queue_size=7))
    assert agent.started == [b"P0"]
    (hello,) = agent.received(m.Hello)
    assert (hello.role, hello.name, hello.hostname, hello.pid, hello.capacity) == (
        m.Role.WORKER, "sim-worker", "sim-host", 4242, 7
    )


def test_tasks_sent_before_the_processor_said_hello_reach_it_after() -> None:
    agent = SimulatedAgent()
    task_ids = agent.submit(3)
    (processor,) = agent.processors.values()
    assert not processor.received, "the ROUTER would have dropped it"
    agent.hello()
    assert list(processor.queue) == task_ids
    agent.check()


def test_tasks_go_to_the_active_processor_and_their_results_to_the_scheduler_as_they_came(
    agent: SimulatedAgent,
) -> None:
    task_ids = agent.submit(2)
    processor = agent.active()
    assert list(processor.queue) == task_ids
    agent.start_task(processor)
    results_frames = m.encode(m.TaskResults(succeeded_ids=[task_ids[0]], payloads=[b"done"], failures=[]))
    actions = agent.core.on_processor_frames(processor.identity, results_frames, agent.now)
    assert len(actions) == 1 and actions[0].frames is results_frames, "results are forwarded, not re-encoded"


def test_a_submission_naming_a_missing_frame_is_dropped_not_forwarded(agent: SimulatedAgent) -> None:
    """The agent reads only the ids of what it forwards, but a message that names a frame it lacks is
    malformed as a whole (PROTOCOL.md §1): it must not reach a processor, whose decode would fail."""
    agent.submit(1)  # the function, so that the next submission carries no objects
    processor = agent.active()
    before = len(processor.received)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=agent.new_task_ids(1),
        args=[b"x" * m.LARGE_PAYLOAD_BYTES],
    )
    control_frame, _payload_frame = m.encode(m.TaskSubmission(objects=[], groups=[group]))
    assert agent.core.on_scheduler_frames([control_frame], agent.now) == []
    assert len(processor.received) == before


def test_results_from_a_processor_the_agent_stopped_are_dropped(agent: SimulatedAgent) -> None:
    (task_id,) = agent.submit(1)
    processor = agent.run_next()
    agent.crash(processor)
    late = m.encode(m.TaskResults(succeeded_ids=[task_id], payloads=[b"late"], failures=[]))
    assert agent.core.on_processor_frames(processor.identity, late, agent.now) == []


# ---------------------------------------------------------------------------------------------- nested tasks


def test_a_granted_wait_hands_the_queue_to_a_new_active_processor_and_starts_a_spare(agent: SimulatedAgent) -> None:
    first, *queued = agent.submit(3)
    waiting = agent.run_next()
    assert agent.block(waiting)
    assert agent.started == [b"P0", b"P1", b"P2"], "a new active one, and a spare ahead of the next wait"
    assert agent.role_of(waiting) == "blocked"
    agent.hello()
    active = agent.active()
    assert active.identity == b"P1" and list(active.queue) == queued
    assert waiting.held() == {first}, "only the waiting task stays with the blocked processor"
    assert agent.role_of(agent.processors[b"P2"]) == "spare"
    later = agent.submit(1)
    assert list(active.queue) == queued + later
    agent.check()


def test_a_new_active_processor_is_given_every_object_before_any_task(agent: SimulatedAgent) -> None:
    data = m.ObjectPayload(object_id=b"d" * 32, payload=b"data", name="data")
    agent.submit(1, objects=[data])
    waiting, _ = agent.wait_in_active()
    first_message = agent.active().received[0]
    assert isinstance(first_message, m.TaskSubmission) and not first_message.groups
    assert {item.object_id for item in first_message.objects} == {FUNCTION_ID, data.object_id}
    agent.check()


def test_a_wait_beyond_max_processors_is_refused_with_the_limit_named() -> None:
    agent = make_agent(max_processors=2)
    agent.submit(3)
    first, granted = agent.wait_in_active()
    assert granted
    second = agent.run_next()
    assert not agent.block(second), "two processors run already"
    answer = second.answer
    assert answer is not None and "--max-processors 2" in answer.reason and "sim-worker" in answer.reason
    assert len(agent.processors) == 2 and agent.role_of(second) == "active"
    agent.check()


def test_a_processor_whose_wait_ended_finishes_its_task_then_becomes_the_spare_the_next_wait_reuses(
    agent: SimulatedAgent,
) -> None:
    agent.submit(2)
    waiting, _ = agent.wait_in_active()
    agent.unblock(waiting)
    assert agent.role_of(waiting) == "finishing"
    agent.submit(1)
    assert not waiting.queue, "a finishing processor gets no new task"
    agent.finish(waiting)
    assert agent.role_of(waiting) == "spare"

    started = list(agent.started)
    spares = {identity for identity, p in agent.core.pool.processors.items() if p.role.value == "spare"}
    active = agent.run_next()
    assert agent.block(active)
    assert agent.started == started, "an idle spare took over: no new process"
    assert agent.active().identity in spares
    agent.check()


def test_spares_beyond_the_first_are_stopped_after_idling(agent: SimulatedAgent) -> None:
    agent.submit(3)
    first, _ = agent.wait_in_active()
    second, _ = agent.wait_in_active()
    for processor in (second, first):
        agent.unblock(processor)
        agent.finish(processor)
    spares = sorted(identity for identity, p in agent.core.pool.processors.items() if p.role.value == "spare")
    assert len(spares) == 3
    assert not of_type(agent.tick(SPARE_IDLE_SECONDS / 2), StopProcessor)
    stops = of_type(agent.tick(SPARE_IDLE_SECONDS), StopProcessor)
    assert len(stops) == 2 and len(agent.processors) == 2, "the active one and one spare stay"
    agent.check()


# ---------------------------------------------------------------------------------------------- limits


def test_a_task_over_the_timeout_fails_with_task_timeout_error_and_the_rest_go_back() -> None:
    agent = make_agent(task_timeout_seconds=5.0)
    running, *queued = agent.submit(3)
    processor = agent.run_next()
    agent.tick(0.1)
    assert not of_type(agent.tick(4.0), StopProcessor)
    actions = agent.tick(1.5)
    assert of_type(actions, StopProcessor) == [StopProcessor(processor.identity)]
    assert len(of_type(actions, StartProcessor)) == 1, "a new processor serves"
    failure = agent.failures(m.FailureKind.RAISED)[running]
    assert failure.type_name == "scaler.errors.TaskTimeoutError" and "--task-timeout-seconds" in failure.message
    assert isinstance(pickle.loads(failure.exception), TaskTimeoutError)
    assert set(agent.failures(m.FailureKind.RETURNED)) == set(queued)
    agent.check()


def test_a_task_over_both_its_timeout_and_the_memory_limit_fails_with_memory_limit_error_naming_both() -> None:
    # Only a longer timeout would not let it succeed: its memory would stop it again.
    agent = make_agent(task_timeout_seconds=5.0, memory_limit_bytes=1000)
    (task_id,) = agent.submit(1)
    processor = agent.run_next()
    agent.tick(0.1)  # the tick that sees it start
    assert of_type(agent.tick(6.0, rss={processor.identity: 1001}), StopProcessor)
    failure = agent.failures(m.FailureKind.RAISED)[task_id]
    assert isinstance(pickle.loads(failure.exception), MemoryLimitError)
    assert "--memory-limit-bytes" in failure.message and "--task-timeout-seconds" in failure.message
    agent.check()


def test_the_timeout_counts_from_when_the_task_started_not_from_the_one_before() -> None:
    agent = make_agent(task_timeout_seconds=5.0)
    agent.submit(2)
    processor = agent.run_next()
    agent.tick(4.0)
    agent.finish(processor)
    agent.start_task(processor)
    agent.tick(4.0)
    assert not agent.failures(m.FailureKind.RAISED)
    agent.check()


def test_a_processor_over_the_memory_limit_fails_its_task_with_memory_limit_error() -> None:
    agent = make_agent(memory_limit_bytes=1000)
    assert agent.core.watches_memory
    running, queued = agent.submit(2)
    processor = agent.active()
    assert not of_type(agent.tick(rss={processor.identity: 5000}), StopProcessor), "an idle processor is not checked"
    agent.start_task(processor)
    assert not of_type(agent.tick(rss={processor.identity: 999}), StopProcessor)
    assert of_type(agent.tick(rss={processor.identity: 1001}), StopProcessor)
    failure = agent.failures(m.FailureKind.RAISED)[running]
    assert failure.type_name == "scaler.errors.MemoryLimitError" and "1,001 bytes" in failure.message
    assert isinstance(pickle.loads(failure.exception), MemoryLimitError)
    assert set(agent.failures(m.FailureKind.RETURNED)) == {queued}
    agent.check()


def test_without_limits_no_memory_is_asked_for(agent: SimulatedAgent) -> None:
    assert not agent.core.watches_memory


# ---------------------------------------------------------------------------------------------- crash blame


def test_a_processor_that_dies_fails_its_running_task_as_worker_died_and_returns_the_rest(
    agent: SimulatedAgent,
) -> None:
    running, *queued = agent.submit(3)
    processor = agent.run_next()
    agent.crash(processor, exit_code=-11)
    failure = agent.failures(m.FailureKind.WORKER_DIED)[running]
    assert failure.type_name == "scaler.errors.WorkerDiedError" and "exit code -11" in failure.message
    assert set(agent.failures(m.FailureKind.RETURNED)) == set(queued)
    assert agent.started == [b"P0", b"P1"], "a new processor takes over"
    agent.hello()
    agent.submit(1)
    assert agent.active().identity == b"P1"
    agent.check()


def test_a_processor_that_dies_between_tasks_blames_none(agent: SimulatedAgent) -> None:
    agent.submit(2)
    processor = agent.run_next()
    agent.finish(processor)
    agent.crash(processor)
    assert not agent.failures(m.FailureKind.WORKER_DIED)
    assert len(agent.failures(m.FailureKind.RETURNED)) == 1
    agent.check()


def test_a_blocked_processor_that_dies_blames_only_its_waiting_task(agent: SimulatedAgent) -> None:
    waiting_task, *queued = agent.submit(3)
    waiting, _ = agent.wait_in_active()
    started = list(agent.started)
    agent.crash(waiting)
    assert set(agent.failures(m.FailureKind.WORKER_DIED)) == {waiting_task}
    assert not agent.failures(m.FailureKind.RETURNED), "its queue was handed over already"
    assert agent.started == started, "it was not the active one: nothing to replace"
    assert set(agent.active().queue) == set(queued)
    agent.check()


# ---------------------------------------------------------------------------------------------- suspects


def test_a_suspect_asks_to_start_and_the_answer_goes_only_to_the_processor_that_holds_it(
    agent: SimulatedAgent,
) -> None:
    waiting_task = agent.submit(1)[0]
    (suspect,) = agent.submit(1, report_start=True)
    first, _ = agent.wait_in_active(waiting_task)
    holder = agent.active()
    assert suspect in holder.queue, "handed over with its report_start"
    assert agent.start_task(holder, suspect) is None, "it waits for the scheduler's answer"
    assert agent.received(m.TaskStarted) == [m.TaskStarted(task_ids=[suspect])]
    agent.grant_start([suspect])
    assert holder.received_of(m.TaskStarted) == [m.TaskStarted(task_ids=[suspect])]
    assert not first.received_of(m.TaskStarted) and not first.unread, "not to a processor that does not hold it"
    assert agent.start_task(holder, suspect) == suspect
    agent.check()


# ---------------------------------------------------------------------------------------------- heartbeats


def test_heartbeats_carry_the_queued_count_the_usage_and_the_latency(agent: SimulatedAgent) -> None:
    agent.submit(3)
    assert agent.core.heartbeat_due(agent.now)
    usage = m.Heartbeat(cpu_percent=12.5, rss_bytes=1000, processor_cpu_percent=50.0, processor_rss_bytes=2000)
    agent.tick(usage=usage)
    heartbeat = agent.droppable[-1]
    assert heartbeat == m.Heartbeat(
        cpu_percent=12.5, rss_bytes=1000, queued_tasks=3, processor_cpu_percent=50.0, processor_rss_bytes=2000,
    )
    agent.now += 0.5
    agent.from_scheduler(m.HeartbeatEcho())
    assert not agent.core.heartbeat_due(agent.now)
    agent.tick(2.0)
    assert agent.droppable[-1].latency_us == 500_000


def test_the_welcome_may_ask_for_more_frequent_heartbeats() -> None:
    agent = SimulatedAgent(WorkerConfig(address=ADDRESS, heartbeat_interval_seconds=2.0))
    agent.tick()
    agent.welcome(peer_timeout_ms=3000)
    assert not agent.core.heartbeat_due(agent.now + 0.9)
    assert agent.core.heartbeat_due(agent.now + 1.0)


def test_the_first_welcome_registers_once(agent: SimulatedAgent) -> None:
    assert agent.registered == 1
    agent.welcome()
    assert agent.registered == 1


# ---------------------------------------------------------------------------------------------- leaving


def test_a_disconnect_from_the_scheduler_ends_the_worker(agent: SimulatedAgent) -> None:
    agent.from_scheduler(m.Disconnect(reason="shutting down"))
    assert agent.exits == [Exit("scheduler asked us to leave: shutting down")]


def test_a_refusal_ends_the_worker_as_failed_only_before_the_welcome(agent: SimulatedAgent) -> None:
    def refused(reason: str) -> str:  # the line names the worker's own versions too (PROTOCOL.md §22)
        return (f"scheduler refused us (worker of {m.RELEASE}, protocol version {m.PROTOCOL_VERSION}; scheduler at "
                f"{agent.config.address}): {reason}")

    agent.from_scheduler(m.Refused(reason="unknown peer"))
    assert agent.exits == [Exit(refused("unknown peer"), failed=False, level=logging.WARNING)]
    never_welcomed = SimulatedAgent()
    never_welcomed.from_scheduler(m.Refused(reason="version"))
    assert never_welcomed.exits == [Exit(refused("version"), failed=True, level=logging.ERROR)]


def test_silence_from_the_scheduler_ends_the_worker_after_the_death_timeout() -> None:
    never_welcomed = SimulatedAgent(WorkerConfig(address=ADDRESS, death_timeout_seconds=10.0))
    never_welcomed.tick(10.0)
    assert not never_welcomed.exits
    never_welcomed.tick(0.5)
    (exit,) = never_welcomed.exits
    assert exit.failed and f"no scheduler answered at {ADDRESS} within 10s" in exit.reason

    agent = make_agent(death_timeout_seconds=10.0)
    agent.tick(9.0)
    agent.from_scheduler(m.HeartbeatEcho())
    agent.tick(9.0)
    assert not agent.exits, "every message counts as a sign of life"
    agent.tick(1.5)
    (exit,) = agent.exits
    assert not exit.failed and "no word from the scheduler for 10s" in exit.reason


def test_an_undecodable_message_from_the_scheduler_is_dropped(
    agent: SimulatedAgent, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert agent.core.on_scheduler_frames([b"not capnp"], agent.now) == []
    assert "dropped an undecodable message from the scheduler" in caplog.text


def test_an_input_a_processor_could_not_read_is_reported_lost_before_its_task_comes_back(
    agent: SimulatedAgent,
) -> None:
    (task_id,) = agent.submit(1)
    processor = agent.run_next()
    lost_input = b"\x07" * 32
    agent.lose_input(processor, lost_input)
    messages = [message for message in agent.to_scheduler if isinstance(message, (m.ObjectsLost, m.TaskResults))]
    assert messages == [
        m.ObjectsLost(object_ids=[lost_input]),
        m.TaskResults(
            succeeded_ids=[], payloads=[], failures=[m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED)]
        ),
    ]
    agent.check()
