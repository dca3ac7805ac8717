"""A client that says hello again to a restarted scheduler, naming the id prefix it had (PROTOCOL.md §4,
"Resuming after a restart"): taken back unless this scheduler process ever gave it out; everything a new
client is refused for is refused to a resuming one too. And a client or a store that says hello again to a
scheduler that still has it (it moved to another scheduler address and came back, §23)."""

from __future__ import annotations

import dataclasses

import pytest
from core_harness import SimClient, SimulatedCluster, payload_for

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig, first_id_prefix_at

OLD_PREFIX = 0x2A0001


def resume(cluster: SimulatedCluster, identity: bytes, prefix: int, **fields: object) -> SimClient:
    client = cluster.clients[identity] = SimClient(identity=identity)
    cluster.send(identity, m.Hello(role=m.Role.CLIENT, name=identity.decode(), id_prefix=prefix, **fields))
    return client


def test_a_resuming_client_keeps_its_prefix_and_its_task_ids_are_accepted() -> None:
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=10)
    client = resume(cluster, b"old-client", OLD_PREFIX)
    (welcome,) = client.received(m.Welcome)
    assert welcome.id_prefix == OLD_PREFIX and client.prefix == OLD_PREFIX
    client.counter = 400  # it goes on where it was: ids it made before the restart are its own
    ids = cluster.submit(client, 5)
    # A resumed client's tasks first wait for the workers of the scheduler before to come back (rejoin.py).
    assert cluster.workers[b"worker-0"].received_task_ids == []
    cluster.tick(cluster.core.rejoin.hold_seconds)
    cluster.run_to_completion()
    assert {task_id: client.outcomes[task_id] for task_id in ids} == {
        task_id: [("ok", payload_for(task_id))] for task_id in ids
    }


def test_a_prefix_this_scheduler_gave_out_is_refused_to_anyone_else() -> None:
    cluster = SimulatedCluster()
    first = cluster.add_client()
    resumed = resume(cluster, b"resumed", OLD_PREFIX)
    for identity, prefix in ((b"thief", first.prefix), (b"twin", OLD_PREFIX)):
        stranger = resume(cluster, identity, prefix)
        (refused,) = stranger.received(m.Refused)
        assert f"id prefix {prefix:#x} is taken" in refused.reason
    # Even once its client has left: a task id names one client for the life of a scheduler process.
    cluster.send(resumed.identity, m.Disconnect(reason="bye"))
    late = resume(cluster, b"late", OLD_PREFIX)
    assert late.received(m.Refused) and not late.received(m.Welcome)
    assert cluster.core.client_count == 1


def test_new_clients_never_get_a_prefix_a_resumed_client_took() -> None:
    cluster = SimulatedCluster(CoreConfig(first_id_prefix=OLD_PREFIX - 1))
    resume(cluster, b"resumed", OLD_PREFIX)
    prefixes = [cluster.add_client().prefix for _ in range(3)]
    assert OLD_PREFIX not in prefixes and len(set(prefixes)) == 3 and all(prefixes)


@pytest.mark.parametrize("fields, reason", [
    ({"protocol_version": m.PROTOCOL_VERSION + 1}, "protocol version"),
    ({"share": 0.0}, "share"),
])
def test_a_resuming_client_is_refused_what_a_new_one_is(fields: dict, reason: str) -> None:
    cluster = SimulatedCluster()
    client = resume(cluster, b"resumed", OLD_PREFIX, **fields)
    (refused,) = client.received(m.Refused)
    assert reason in refused.reason and cluster.core.client_count == 0


@pytest.mark.parametrize("prefix", [0, OLD_PREFIX + 1])
def test_hello_twice_stays_a_protocol_error_unless_it_names_the_clients_own_prefix(prefix: int) -> None:
    cluster = SimulatedCluster()
    client = resume(cluster, b"resumed", OLD_PREFIX)
    cluster.send(client.identity, m.Hello(role=m.Role.CLIENT, id_prefix=prefix))
    assert isinstance(client.inbox[-1], m.ProtocolError) and "hello sent twice" in client.inbox[-1].reason
    assert cluster.core.client_count == 1 and client.prefix == OLD_PREFIX


def test_a_client_back_at_a_scheduler_that_still_has_it_goes_on_and_each_task_runs_once_more_at_most() -> None:
    """It moved to another address (this scheduler silent to it) and came back before its timeout: welcomed again
    under its prefix, it sends again every task without an outcome. Those still here stay where they are; one
    whose outcome went out while it was away (lost) runs again; one finished after it came back is not run again."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client(b"mover")
    ids = cluster.submit(client, 6)
    assert list(worker.pending) == ids
    cluster.complete(worker, task_ids=ids[:2])  # outcomes sent while it was away: lost to it
    client.inbox.clear()
    client.outcomes.clear()
    cluster.send(client.identity, m.Hello(role=m.Role.CLIENT, name="mover", id_prefix=client.prefix))
    (welcome,) = client.received(m.Welcome)
    assert welcome.id_prefix == client.prefix and cluster.core.client_count == 1
    cluster.complete(worker, task_ids=ids[2:3])  # after it came back: its outcome reaches it
    received_before = list(worker.received_task_ids)
    cluster.submit(client, 0, task_ids=ids[:2] + ids[3:], send_object=True)  # what had no outcome, sent again
    assert not client.failures()
    assert worker.received_task_ids[len(received_before):] == ids[:2]  # only the lost ones run again
    assert cluster.core.counters["tasks_submitted"] == len(ids) + 2  # those run again count once more
    cluster.run_to_completion()
    assert {task_id: [outcome for outcome, _ in client.outcomes[task_id]] for task_id in ids} == {
        task_id: ["ok"] for task_id in ids
    }
    # Sent once more after that, a task id is in use again like any other.
    cluster.submit(client, 0, task_ids=ids[:1], send_object=False)
    assert client.failures() == []  # finished: the id is free again


def test_schedulers_started_seconds_apart_give_new_clients_different_prefixes() -> None:
    first, second = first_id_prefix_at(1_700_000_000.2), first_id_prefix_at(1_700_000_002.9)
    assert first != second and abs(first - second) >= 1 << 16
    assert all(0 < first_id_prefix_at(t) < 2**32 - (1 << 16) + 1 for t in (0, 65_534, 65_535, 1e12))


def test_a_reserved_prefix_goes_to_no_new_client_but_its_own_client_takes_it_back() -> None:
    """Prefixes of task ids workers re-announced after a restart (the scheduler's orphan results) are reserved."""
    cluster = SimulatedCluster(CoreConfig(first_id_prefix=OLD_PREFIX))
    cluster.core.peers.reserve_id_prefix(OLD_PREFIX)
    assert cluster.add_client().prefix == OLD_PREFIX + 1
    resumed = resume(cluster, b"resumed", OLD_PREFIX)
    assert resumed.prefix == OLD_PREFIX


def test_a_store_back_at_a_scheduler_that_still_has_it_keeps_its_objects_and_deletes_what_was_freed_meanwhile() -> None:
    """It moved to another scheduler address and came back before it was dropped: welcomed again in place, it
    announces what it holds; a result it holds stays there (not made again), and an object freed while it was
    away (the delete sent to it then was lost) is deleted now."""
    cluster = SimulatedCluster()
    holder = "tcp://store-a:1"
    store = cluster.add_store(holder)
    worker = cluster.add_worker(store=holder, host_key="host-a")
    client = cluster.add_client(host_key="host-a")
    kept, freed = cluster.submit(client, 2)
    results = cluster.complete_stored(worker, [kept, freed], holder)
    cluster.send(client.identity, m.DeleteObjects(object_ids=[results[freed]]))  # its delete to the store: lost
    runs = list(worker.received_task_ids)
    store.inbox.clear()
    again = m.Hello(role=m.Role.STORE, name="store-0", host_key="host-a", data_address=holder,
                    ipc_address="ipc:///stores/store-0", capacity_bytes=1 << 30)
    cluster.send(store.identity, again)
    assert isinstance(store.inbox[-1], m.Welcome), store.inbox
    cluster.send(store.identity, m.ObjectsHeld(object_ids=list(results.values()), sizes=[1 << 20, 1 << 20]))
    assert store.received(m.DeleteObjects) == [m.DeleteObjects(object_ids=[results[freed]])]
    assert cluster.core.objects.stored[results[kept]].holders == {holder}
    cluster.tick(1.0)
    assert worker.received_task_ids == runs, "a result the store held was made again"
    # Naming another data address, its hello is a breach as before.
    cluster.send(store.identity, dataclasses.replace(again, data_address="tcp://store-b:1"))
    assert isinstance(store.inbox[-1], m.ProtocolError) and "hello sent twice" in store.inbox[-1].reason
