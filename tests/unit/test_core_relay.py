"""The relay fallback in the scheduler core (PROTOCOL.md §19): a data message from a client or a store that cannot
reach a store goes to that store over its control link, naming the requester; the store's answer goes back to the
requester. The payload bytes both ways are counted (bytes_relayed, the monitor feed), each requester and store pair
is logged once, the frames pass on as the very objects that came in, and a request for a store nobody registered
is answered with an error, not dropped."""

from __future__ import annotations

import logging

import pytest
from core_harness import SimulatedCluster

from scaler.protocol import messages as m

pytestmark = pytest.mark.timeout(60)

A = "tcp://10.0.0.1:7001"
B = "tcp://10.0.0.2:7002"
RELAY_LOG = "RelayRouter: relaying data between"


def relays_to(inbox: list) -> list[m.Relay]:
    return [message for message in inbox if isinstance(message, m.Relay)]


def test_a_clients_request_reaches_the_store_and_the_answer_comes_back() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    client = cluster.add_client()
    payload = memoryview(bytearray(3000))
    request = [b"put request", payload]

    cluster.send(client.identity, m.Relay(frames=request, store=A, request_id=7))

    (passed,) = relays_to(store.inbox)
    assert passed.peer == client.identity and passed.request_id == 7 and not passed.store
    assert passed.frames[1] is payload, "the payload frame is passed on, not copied"
    assert cluster.core.status(cluster.now).bytes_relayed == 3000

    answer = [b"object answer", b"x" * 5000]
    cluster.send(store.identity, m.Relay(frames=answer, peer=client.identity))

    (back,) = relays_to(client.inbox)
    assert back.store == A and back.frames == answer and not back.peer and not back.error
    assert cluster.core.counters["bytes_relayed"] == 8000


def test_a_store_fetching_from_a_store_it_cannot_reach_relays_too() -> None:
    cluster = SimulatedCluster()
    holder = cluster.add_store(A)
    reader = cluster.add_store(B)

    cluster.send(reader.identity, m.Relay(frames=[b"get request"], store=A, request_id=1))
    (passed,) = relays_to(holder.inbox)
    assert passed.peer == reader.identity
    cluster.send(holder.identity, m.Relay(frames=[b"object", b"12345"], peer=reader.identity))
    (back,) = relays_to(reader.inbox)
    assert back.store == A and back.frames == [b"object", b"12345"]
    assert cluster.core.counters["bytes_relayed"] == 5


def test_a_request_for_an_unknown_store_gets_an_error_naming_it() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(A)
    client = cluster.add_client()

    out = cluster.send(client.identity, m.Relay(frames=[b"get", b"data"], store=B, request_id=42))

    assert out == [(client.identity, m.Relay(
        frames=[], store=B, request_id=42,
        error=f"no store with data address {B!r} is registered with the scheduler",
    ))]
    assert cluster.core.counters["bytes_relayed"] == 0
    assert cluster.core.client_count == 1, "the requester stays registered"


def test_only_a_store_answers_and_an_answer_for_a_departed_requester_is_dropped() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    client = cluster.add_client()

    (_, error), = cluster.send(client.identity, m.Relay(frames=[b"answer"], peer=b"someone"))
    assert isinstance(error, m.ProtocolError) and "only a store answers" in error.reason

    assert cluster.send(store.identity, m.Relay(frames=[b"answer", b"lost"], peer=b"gone")) == []
    assert cluster.core.counters["bytes_relayed"] == 0


def test_each_requester_and_store_pair_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    cluster = SimulatedCluster()
    store_a = cluster.add_store(A)
    cluster.add_store(B)
    client = cluster.add_client()
    other = cluster.add_client()

    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            cluster.send(client.identity, m.Relay(frames=[b"get"], store=A))
            cluster.send(store_a.identity, m.Relay(frames=[b"missing"], peer=client.identity))
        cluster.send(client.identity, m.Relay(frames=[b"get"], store=B))
        cluster.send(other.identity, m.Relay(frames=[b"get"], store=A))

    lines = [record.getMessage() for record in caplog.records if RELAY_LOG in record.getMessage()]
    assert len(lines) == 3, lines
    assert f"client {client.identity.decode()} and store {store_a.identity.decode()}" in lines[0]
    assert A in lines[0] and "cannot reach" in lines[0]


def test_a_requester_that_comes_back_is_logged_again() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    client = cluster.add_client()
    cluster.send(client.identity, m.Relay(frames=[b"get"], store=A))
    assert (client.identity, A) in cluster.core.relay._announced

    cluster.send(client.identity, m.Disconnect())
    cluster.send(store.identity, m.Disconnect())

    assert not cluster.core.relay._announced


def relay_errors(inbox: list) -> list[tuple[int, str]]:
    return [(relay.request_id, relay.error) for relay in relays_to(inbox) if relay.error]


def test_requests_a_store_had_not_answered_when_it_left_are_answered_with_an_error_naming_it() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    reader_store = cluster.add_store(B)
    client = cluster.add_client()
    departed = cluster.add_client()
    for request_id in (7, 8):
        cluster.send(client.identity, m.Relay(frames=[b"get"], store=A, request_id=request_id))
    cluster.send(reader_store.identity, m.Relay(frames=[b"get"], store=A, request_id=3))
    cluster.send(departed.identity, m.Relay(frames=[b"get"], store=A, request_id=1))
    cluster.send(departed.identity, m.Disconnect())
    cluster.send(store.identity, m.Relay(frames=[b"object"], peer=client.identity))  # the answer to 7

    cluster.send(store.identity, m.Disconnect())

    (client_error,) = relay_errors(client.inbox)
    assert client_error[0] == 8
    assert store.identity.decode() in client_error[1] and A in client_error[1] and "left" in client_error[1]
    assert [request_id for request_id, _ in relay_errors(reader_store.inbox)] == [3]
    assert not relay_errors(departed.inbox), "nobody waits for the answers of a requester that left"
    assert all(relay.store == A for relay in relays_to(client.inbox))
    assert not cluster.core.relay._pending


def test_a_store_that_times_out_answers_its_pending_relayed_requests_too() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    client = cluster.add_client()
    cluster.send(client.identity, m.Relay(frames=[b"get"], store=A, request_id=5))

    for _ in range(200):  # the client keeps its link alive; the store says nothing
        cluster.heartbeat_all(except_for=[store.identity])
        cluster.tick(1.0)
        if relay_errors(client.inbox):
            break

    ((request_id, error),) = relay_errors(client.inbox)
    assert request_id == 5 and A in error and "timed out" in error


def test_answered_requests_leave_nothing_pending() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    client = cluster.add_client()
    for request_id in range(3):
        cluster.send(client.identity, m.Relay(frames=[b"get"], store=A, request_id=request_id))
        cluster.send(store.identity, m.Relay(frames=[b"answer"], peer=client.identity))
    assert not cluster.core.relay._pending

    cluster.send(store.identity, m.Disconnect())
    assert not relay_errors(client.inbox)
