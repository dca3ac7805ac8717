"""Several scheduler addresses: their syntax (utility/scheduler_addresses.py) and which one a peer talks to
(protocol/address_rotation.py), alone and inside the worker agent's and the client connection's cores."""

from __future__ import annotations

import pytest
from agent_harness import SimulatedAgent
from hypothesis import given
from hypothesis import strategies as st

from scaler.client.connection_actions import Reconnect as ClientReconnect
from scaler.client.connection_actions import Send
from scaler.client.connection_core import ClientConnectionCore
from scaler.protocol import messages as m
from scaler.protocol.address_rotation import LAST_MOVE_WAIT_SECONDS, AddressRotation, silence_seconds
from scaler.protocol.scheduler_session import HELLO_TWICE
from scaler.scheduler.core.message_rules import violation
from scaler.utility.scheduler_addresses import first_scheduler_address, parse_scheduler_addresses
from scaler.worker.agent_actions import Reconnect
from scaler.worker.config import WorkerConfig

A, B, C = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"
STANDBY = m.Refused(reason="standby scheduler", standby=True)


def test_addresses_are_comma_separated_in_rank_order() -> None:
    assert parse_scheduler_addresses(f"{A}, {B}") == (A, B)
    assert parse_scheduler_addresses(A) == (A,)
    assert first_scheduler_address(f"{B},{A}") == B
    with pytest.raises(ValueError, match="twice"):
        parse_scheduler_addresses(f"{A},{A}")
    with pytest.raises(ValueError, match="not a ZeroMQ address"):
        parse_scheduler_addresses(f"{A},b:2")


def test_one_address_never_moves() -> None:
    rotation = AddressRotation((A,), silence_seconds=1.0)
    rotation.refused(0.0)
    assert rotation.on_tick(1000.0, last_heard=0.0) is None


def test_a_standby_refusal_moves_at_once_then_after_a_doubling_wait_until_a_welcome() -> None:
    rotation = AddressRotation((A, B), silence_seconds=100.0)
    rotation.refused(0.0)
    assert rotation.on_tick(0.0, last_heard=0.0) == B
    rotation.refused(0.0)
    assert rotation.on_tick(0.0, last_heard=0.0) is None, "a second refusal in a row waits"
    assert rotation.on_tick(0.1, last_heard=0.0) == A
    rotation.welcomed()
    rotation.refused(1.0)
    assert rotation.on_tick(1.0, last_heard=1.0) == B


def test_silence_moves_to_the_next_address_and_wraps_around() -> None:
    rotation = AddressRotation((A, B, C), silence_seconds=2.0)
    assert rotation.on_tick(1.9, last_heard=0.0) is None
    assert [rotation.on_tick(t, last_heard=0.0) for t in (2.1, 4.2, 6.3)] == [B, C, A]
    assert rotation.on_tick(7.0, last_heard=6.9) is None, "heard lately: stay"


def test_a_peer_tries_a_standby_well_before_its_death_timeout() -> None:
    assert silence_seconds(2.0, 300.0) == 6.0
    assert silence_seconds(0.1, 300.0) == 1.0
    assert silence_seconds(2.0, 3.0) == 1.0


@given(st.lists(st.tuples(st.sampled_from(["refused", "welcomed", "tick"]), st.floats(0, 5)), max_size=60),
       st.integers(1, 4))
def test_refusals_move_round_the_list_in_order_within_the_longest_wait(events, count) -> None:
    addresses = tuple(f"tcp://127.0.0.1:{port}" for port in range(1, count + 1))
    rotation = AddressRotation(addresses, silence_seconds=1000.0)
    now, index = 0.0, 0
    refused_at: float | None = None  # a refusal not yet followed by a move or a welcome
    for kind, advance in events:
        now += advance
        if kind == "refused":
            rotation.refused(now)
            if refused_at is None and count > 1:
                refused_at = now
        elif kind == "welcomed":
            rotation.welcomed()
            refused_at = None
        else:
            moved = rotation.on_tick(now, last_heard=now)  # heard just now: only a refusal moves
            if moved is not None:
                assert refused_at is not None, "moved with no refusal pending"
                index = (index + 1) % count
                assert moved == addresses[index]
                refused_at = None
            elif refused_at is not None:
                assert now < refused_at + LAST_MOVE_WAIT_SECONDS, "a refusal left pending past the longest wait"
        assert rotation.current == addresses[index]


def test_a_worker_refused_by_a_standby_moves_on_and_rejoins_where_it_is_welcomed() -> None:
    agent = SimulatedAgent(WorkerConfig(address=f"{A},{B}", heartbeat_interval_seconds=1.0))
    agent.welcome()
    agent.hello()
    running, _ = agent.submit(2)
    processor = agent.run_next()
    agent.from_scheduler(STANDBY)
    assert not agent.exits
    actions = agent.tick(0.0)
    assert Reconnect(B) in actions
    assert agent.received(m.Hello)[-1].rejoining
    assert processor.running == running, "the task keeps running"
    agent.welcome()
    assert agent.received(m.Reannounce), "welcomed at the next address, it re-announces its tasks"


def test_a_worker_whose_scheduler_went_silent_tries_the_next_and_a_standby_refusal_is_not_a_word() -> None:
    agent = SimulatedAgent(WorkerConfig(address=f"{A},{B}", heartbeat_interval_seconds=1.0,
                                        death_timeout_seconds=10.0))
    agent.welcome()
    assert not any(isinstance(action, Reconnect) for action in agent.tick(2.9))
    assert Reconnect(B) in agent.tick(0.2)
    for _ in range(20):  # refused by the standby, silence at the first: the death timeout still runs
        agent.from_scheduler(STANDBY)
        agent.tick(0.5)
    assert agent.exits, "no scheduler served for the death timeout: the worker exits"


def test_a_client_refused_by_a_standby_moves_on_and_resumes_there() -> None:
    core = ClientConnectionCore(f"{A},{B}", m.Hello(role=m.Role.CLIENT), 60.0, 1.0)
    core.start(0.0)
    assert not core.on_message(STANDBY, 0.1), "a standby's refusal ends nothing"
    actions = core.on_tick(0.1)
    assert actions[:2] == [ClientReconnect(B), Send(m.Hello(role=m.Role.CLIENT))]
    core.on_message(m.Welcome(id_prefix=7), 0.2)
    assert core.welcomed
    core.on_message(STANDBY, 1.0)  # that one steps down: the client resumes at the next, under its prefix
    actions = core.on_tick(1.0)
    assert isinstance(actions[0], ClientReconnect) and actions[0].address == A
    hello = actions[1]
    assert isinstance(hello, Send) and isinstance(hello.message, m.Hello) and hello.message.id_prefix == 7
    assert not core.is_over


HELLO_TWICE_ERROR = m.ProtocolError(reason=violation(m.Role.WORKER, m.Hello))


def test_a_worker_back_at_a_scheduler_that_still_has_it_leaves_it_once_and_joins_again() -> None:
    assert HELLO_TWICE in HELLO_TWICE_ERROR.reason, "the scheduler's words the peers look for"
    agent = SimulatedAgent(WorkerConfig(address=f"{A},{B}", heartbeat_interval_seconds=1.0))
    agent.welcome()
    agent.from_scheduler(STANDBY)  # at A, told to go: to B, which
    agent.tick(0.0)
    agent.from_scheduler(STANDBY)  # stands by (A serves, though A was silent to us): back to A
    assert Reconnect(A) in agent.tick(0.2)
    sent = len(agent.to_scheduler)
    agent.from_scheduler(HELLO_TWICE_ERROR)  # A never dropped us: our rejoining hello is one too many
    assert [type(message) for message in agent.to_scheduler[sent:]] == [m.Disconnect, m.Hello]
    agent.from_scheduler(HELLO_TWICE_ERROR)  # what answers the hellos before: once is enough
    assert len(agent.to_scheduler) == sent + 2
    agent.welcome()
    assert agent.received(m.Reannounce)


def test_a_client_back_at_an_older_scheduler_that_still_has_it_ends_lost_instead_of_waiting_for_ever() -> None:
    """A scheduler of this release welcomes it again (test_core_client_resume.py); one before refused its hello."""
    core = ClientConnectionCore(f"{A},{B}", m.Hello(role=m.Role.CLIENT), 60.0, 1.0)
    core.start(0.0)
    core.on_message(m.Welcome(id_prefix=7), 0.1)
    core.on_message(STANDBY, 1.0)
    core.on_tick(1.0)
    core.on_message(HELLO_TWICE_ERROR, 1.1)  # each hello would only be answered so, and keep it waiting
    assert core.is_over and "still has this client" in str(core.ended)
