"""A worker agent outlives a scheduler that restarts (scheduler_session.py, PROTOCOL.md §21)."""

from __future__ import annotations

import logging

from agent_harness import SimulatedAgent, payload_for

from scaler.protocol import messages as m
from scaler.protocol.scheduler_session import (
    FIRST_HELLO_RETRY_SECONDS,
    LAST_HELLO_RETRY_SECONDS,
    MAX_UNACKNOWLEDGED_BYTES,
    SchedulerSession,
)
from scaler.worker.agent_actions import Exit
from scaler.worker.config import WorkerConfig

ADDRESS = "tcp://127.0.0.1:1"
UNKNOWN = m.Refused(reason="unknown peer", unknown_peer=True)


def make_agent(**settings: float) -> SimulatedAgent:
    agent = SimulatedAgent(WorkerConfig(address=ADDRESS, heartbeat_interval_seconds=1.0, **settings))
    agent.welcome()
    agent.hello()
    return agent


def hellos(agent: SimulatedAgent) -> list[m.Hello]:
    return [message for message in agent.to_scheduler if isinstance(message, m.Hello)]


def test_a_scheduler_that_does_not_know_us_gets_a_hello_again_and_tasks_keep_running() -> None:
    agent = make_agent()
    running, queued = agent.submit(2)
    processor = agent.run_next()
    agent.from_scheduler(UNKNOWN)
    assert not agent.exits and agent.stopped == set()
    assert hellos(agent)[-1].rejoining
    # More refusals answer what we sent before that hello: no hello more for them.
    agent.from_scheduler(UNKNOWN)
    assert len(hellos(agent)) == 2
    assert processor.running == running and queued in processor.queue


def test_after_the_welcome_the_worker_sends_what_it_made_meanwhile_then_reannounces() -> None:
    agent = make_agent()
    first, second, third = agent.submit(3)
    processor = agent.run_next()
    agent.from_scheduler(UNKNOWN)
    sent_before = len(agent.to_scheduler)
    agent.finish(processor)  # ends while no scheduler knows us: held
    assert not any(isinstance(message, m.TaskResults) for message in agent.to_scheduler[sent_before:])
    heartbeats = len(agent.droppable)
    agent.tick(5.0)
    assert len(agent.droppable) == heartbeats, "no heartbeat while the scheduler does not know us"
    agent.welcome()
    after = [message for message in agent.to_scheduler[sent_before:] if not isinstance(message, m.Hello)]
    # Results first: the scheduler gives the worker work once it re-announced, and by then it must know what
    # the worker made, or it hands out again a re-submitted task whose result is on its way.
    assert after[0] == m.TaskResults(succeeded_ids=[first], payloads=[payload_for(first)], failures=[])
    reannounce = after[1]
    assert isinstance(reannounce, m.Reannounce) and set(reannounce.task_ids) == {second, third}
    assert agent.registered == 1, "a second welcome is not a second start"


def test_results_not_acknowledged_by_a_heartbeat_echo_are_sent_again_to_the_next_scheduler() -> None:
    agent = make_agent()
    acked, unacked = agent.submit(2)
    agent.finish(agent.run_next())
    agent.tick(1.0)  # a heartbeat after the first result...
    agent.from_scheduler(m.HeartbeatEcho())  # ...echoed: the scheduler had it
    agent.finish(agent.run_next())  # this one may have died with the scheduler
    agent.from_scheduler(UNKNOWN)
    agent.welcome()
    resent = agent.to_scheduler[-2:]
    assert resent[0].succeeded_ids == [unacked]
    assert isinstance(resent[1], m.Reannounce) and resent[1].task_ids == []
    assert agent.outcomes[acked] == [("ok", payload_for(acked))]


def test_a_heartbeat_echo_acknowledges_only_what_was_sent_before_its_heartbeat() -> None:
    agent = make_agent()
    first, second = agent.submit(2)
    agent.finish(agent.run_next())
    agent.tick(1.0)  # heartbeat 1, after `first`
    agent.finish(agent.run_next())
    agent.tick(1.0)  # heartbeat 2, after `second`
    agent.from_scheduler(m.HeartbeatEcho())  # echoes heartbeat 1 only
    agent.from_scheduler(UNKNOWN)
    agent.welcome()
    assert agent.to_scheduler[-2].succeeded_ids == [second]


def test_hellos_back_off_from_a_tenth_of_a_second_to_two_while_no_welcome_comes() -> None:
    agent = make_agent(death_timeout_seconds=60.0)
    agent.from_scheduler(UNKNOWN)
    sent_at = []
    for _ in range(200):
        count = len(hellos(agent))
        agent.tick(0.05)
        if len(hellos(agent)) > count:
            sent_at.append(agent.now)
    gaps = [round(later - earlier, 2) for earlier, later in zip(sent_at, sent_at[1:])]
    assert gaps[0] >= FIRST_HELLO_RETRY_SECONDS
    assert gaps == sorted(gaps) and max(gaps) <= LAST_HELLO_RETRY_SECONDS + 0.05
    assert gaps[-1] >= LAST_HELLO_RETRY_SECONDS


def test_a_worker_that_rejoins_gives_up_at_the_death_timeout_if_no_scheduler_answers() -> None:
    agent = make_agent(death_timeout_seconds=3.0)
    agent.from_scheduler(UNKNOWN)
    agent.tick(2.0)
    assert not agent.exits
    agent.tick(1.5)
    (exit,) = agent.exits
    assert "no word from the scheduler for 3s" in exit.reason


def test_a_refusal_of_the_hello_again_is_final_and_failed() -> None:
    agent = make_agent()
    agent.from_scheduler(UNKNOWN)
    agent.from_scheduler(m.Refused(reason="protocol version 2 not supported, scheduler speaks 3"))
    # The line names this worker's release and protocol version too: an older scheduler's reason names only its own.
    assert agent.exits == [Exit(
        f"scheduler refused us (worker of {m.RELEASE}, protocol version {m.PROTOCOL_VERSION}; scheduler at "
        f"{ADDRESS}): protocol version 2 not supported, scheduler speaks 3", True, logging.ERROR
    )]


def test_a_refusal_of_the_first_hello_is_final_even_if_it_says_unknown() -> None:
    never_welcomed = SimulatedAgent(WorkerConfig(address=ADDRESS))
    never_welcomed.from_scheduler(UNKNOWN)
    assert never_welcomed.exits and never_welcomed.exits[0].failed


def test_unacknowledged_results_are_bounded_in_bytes_oldest_first() -> None:
    session = SchedulerSession()
    large = [b"x" * (MAX_UNACKNOWLEDGED_BYTES // 2 + 1)]
    session.sent_results(large)
    session.heartbeat_sent()  # never echoed
    session.sent_results([b"small"])
    assert session.unacknowledged() == 2
    session.sent_results(large)  # over the bound: the oldest generation goes
    assert session.unacknowledged() == 2
    session.lost(0.0, "test", ADDRESS)
    assert session.held == [[b"small"], large]
