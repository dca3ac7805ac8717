"""Stores as peers of the scheduler core (PROTOCOL.md §17): they register, heartbeat, time out and leave,
workers are linked to the store they name, and clients and workers are told the directory of stores,
with their home store, in their welcome and whenever a store joins or leaves."""

from __future__ import annotations

import pytest
from core_harness import SimulatedCluster, last_directory

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig

pytestmark = pytest.mark.timeout(60)

A = "tcp://10.0.0.1:7001"
B = "tcp://10.0.0.2:7002"
C = "tcp://10.0.0.3:7003"


def addresses(directory: m.StoreDirectory) -> list[str]:
    return [entry.data_address for entry in directory.stores]


def test_a_store_is_welcomed_and_everyone_hears_of_it() -> None:
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=42))
    client = cluster.add_client(host_key="host-a")
    worker = cluster.add_worker(store=A, host_key="host-a")
    assert last_directory(client.inbox) == m.StoreDirectory()

    store = cluster.add_store(A, host_key="host-a")

    (welcome,) = store.received(m.Welcome)
    assert welcome.peer_timeout_ms == 42_000 and welcome.store_directory == m.StoreDirectory()
    expected = m.StoreDirectory(
        stores=[m.StoreEntry(A, "ipc:///stores/store-0", "host-a")], home_store=A,
    )
    assert client.received(m.StoreDirectory) == [expected]
    assert worker.received(m.StoreDirectory) == [expected]
    later = cluster.add_client()
    assert later.received(m.Welcome)[0].store_directory == expected
    assert cluster.core.stores.store_of(A) is cluster.core.stores.stores[store.identity]


def test_home_is_the_named_store_then_one_on_the_host_then_the_one_with_most_room() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(A, host_key="host-a", capacity_bytes=1000)
    cluster.add_store(B, host_key="host-b", capacity_bytes=5000)
    cluster.add_store(C, host_key="host-b", capacity_bytes=9000)

    on_host_a = cluster.add_client(host_key="host-a")
    on_host_b = cluster.add_client(host_key="host-b")
    elsewhere = cluster.add_client(host_key="host-z")
    named = cluster.add_worker(store=B, host_key="host-a")

    assert last_directory(on_host_a.inbox).home_store == A
    assert last_directory(on_host_b.inbox).home_store == C  # two on its host: the roomier
    assert last_directory(elsewhere.inbox).home_store == C
    assert last_directory(named.inbox).home_store == B
    assert addresses(last_directory(elsewhere.inbox)) == [A, B, C]


def test_room_is_what_the_last_heartbeat_left_in_memory() -> None:
    cluster = SimulatedCluster()
    big = cluster.add_store(A, capacity_bytes=10_000)
    cluster.add_store(B, capacity_bytes=6_000)
    # 9000 held, 2000 of them on disk: 3000 free, less than B's 6000.
    cluster.send(big.identity, m.Heartbeat(bytes_held=9000, bytes_spilled=2000, object_count=3))
    assert cluster.core.stores.stores[big.identity].last_heartbeat.object_count == 3

    assert last_directory(cluster.add_client(host_key="elsewhere").inbox).home_store == B


def test_a_worker_may_name_its_store_before_the_store_registers() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(A)
    worker = cluster.add_worker(store=B)
    assert last_directory(worker.inbox).home_store == A
    assert cluster.core.stores.store_of(B) is None

    cluster.add_store(B)

    assert last_directory(worker.inbox).home_store == B
    assert cluster.core.stores.store_of(B).data_address == B


@pytest.mark.parametrize("hello, reason", [
    (m.Hello(role=m.Role.STORE, name="s", data_address=""), "a store must name its data address"),
    (m.Hello(role=m.Role.STORE, name="s", data_address=A, protocol_version=7),
     f"protocol version 7 not supported: the peer is {m.RELEASE}, protocol version 7, the scheduler is "
     f"{m.RELEASE}, protocol version 1"),
])
def test_a_store_hello_is_refused(hello: m.Hello, reason: str) -> None:
    cluster = SimulatedCluster()
    assert cluster.send(b"store", hello) == [(b"store", m.Refused(reason=reason))]
    assert cluster.core.stores.stores == {}


def test_two_stores_may_not_share_a_data_address() -> None:
    cluster = SimulatedCluster()
    cluster.add_store(A)
    out = cluster.send(b"second", m.Hello(role=m.Role.STORE, data_address=A))
    assert out == [(b"second", m.Refused(reason=f"a store with data address {A} is registered already"))]
    # Once the first is gone, the address is free again (a store restarted on the same port).
    cluster.send(b"store-0", m.Disconnect(reason="bye"))
    assert isinstance(cluster.send(b"second", m.Hello(role=m.Role.STORE, data_address=A))[0][1], m.Welcome)


def test_a_store_heartbeats_and_is_echoed() -> None:
    cluster = SimulatedCluster()
    store = cluster.add_store(A)
    out = cluster.send(store.identity, m.Heartbeat(bytes_held=5, bytes_pinned=4))
    assert out == [(store.identity, m.HeartbeatEcho())]
    assert cluster.core.stores.stores[store.identity].last_heartbeat.bytes_pinned == 4


@pytest.mark.parametrize("how", ["disconnect", "timeout", "malformed"])
def test_a_store_that_leaves_is_forgotten_and_everyone_hears_of_it(how: str) -> None:
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=10, client_timeout_seconds=100))
    leaving = cluster.add_store(A, host_key="host-a")
    cluster.add_store(B, host_key="host-b")
    client = cluster.add_client(host_key="host-a")
    worker = cluster.add_worker(store=A, host_key="host-a")
    assert last_directory(worker.inbox).home_store == A

    if how == "disconnect":
        cluster.send(leaving.identity, m.Disconnect(reason="bye"))
    elif how == "timeout":
        cluster.now += 8
        for identity in (b"store-1", client.identity, worker.identity):
            cluster.send(identity, m.Heartbeat())
        cluster.tick(3)
    else:
        cluster.stray.clear()
        cluster._route(cluster.core.on_bad_frame(leaving.identity, "malformed message: x"))
        assert leaving.inbox[-1] == m.Disconnect(reason="dropped after a malformed message: malformed message: x")

    assert leaving.identity not in cluster.core.stores.stores and cluster.core.stores.store_of(A) is None
    for peer in (client, worker):
        assert addresses(last_directory(peer.inbox)) == [B]
        assert last_directory(peer.inbox).home_store == B
    assert cluster.core.counters["stores_left" if how == "disconnect" else "stores_lost"] == 1
    # The worker still names A: when a store comes back at that address, it is the worker's home again.
    cluster.add_store(A, identity=b"store-again")
    assert last_directory(worker.inbox).home_store == A
    # A forgotten store is refused, so that it can say hello again.
    if how != "malformed":
        assert cluster.send(leaving.identity, m.Heartbeat()) == [
            (leaving.identity, m.Refused(
                reason="unknown peer: send hello first (or you were timed out, or the scheduler restarted)",
                unknown_peer=True,
            ))
        ]


def test_a_store_is_told_when_the_scheduler_shuts_down() -> None:
    cluster = SimulatedCluster(CoreConfig(protected=False))
    store = cluster.add_store(A)
    client = cluster.add_client()
    cluster.send(client.identity, m.ShutdownRequest())
    assert store.inbox[-1] == m.Disconnect(reason="scheduler is shutting down")


def test_many_stores_and_peers_agree_with_the_invariants() -> None:
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=10, client_timeout_seconds=100))
    for index in range(20):
        cluster.add_store(f"tcp://10.0.1.{index}:1", host_key=f"host-{index % 5}")
        cluster.add_worker(store=f"tcp://10.0.1.{index}:1", host_key=f"host-{index % 5}")
    clients = [cluster.add_client(host_key=f"host-{index}") for index in range(6)]
    for index in range(0, 20, 2):
        cluster.send(b"store-%d" % index, m.Disconnect())
    cluster.core.check_invariants()
    remaining = [f"tcp://10.0.1.{index}:1" for index in range(1, 20, 2)]
    for client in clients:
        directory = last_directory(client.inbox)
        assert addresses(directory) == sorted(remaining)
        assert directory.home_store in remaining
