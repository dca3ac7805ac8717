"""Scheduler conformance: the handshake, its version check, heartbeats and peer timeouts (PROTOCOL.md §3, §4,
§5). The tests play clients and workers from DEALER sockets against the scheduler under test.

The tests that need the default options and play only peers of their own, none of them given work, share one
scheduler (scheduler_shared_by_the_module); those that set options, wait out a timeout or hand a worker a task
start their own."""

from __future__ import annotations

import hashlib
import time
from typing import Callable

from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest

StartScheduler = Callable[..., SchedulerUnderTest]
LONGEST_WAIT_SECONDS = 60.0


def test_a_client_is_welcomed_with_its_id_prefix_and_the_limits(scheduler_under_test: StartScheduler) -> None:
    """§4: welcome{version 1, idPrefix 1, 2, ... per client, heartbeat interval, peer timeout, limits}."""
    scheduler = scheduler_under_test("--heartbeat-interval-seconds", "1.5", "--client-timeout-seconds", "45",
                                     "--max-control-frame-bytes", "1000000")
    first = scheduler.peer("client-1").register("client")
    second = scheduler.peer("client-2").register("client")
    assert first.get("protocolVersion") == wire.PROTOCOL_VERSION
    assert first.get("idPrefix", 0) > 0 and second.get("idPrefix", 0) > 0
    assert first.get("idPrefix") != second.get("idPrefix")
    assert first.get("heartbeatIntervalMs") == 1500
    assert first.get("peerTimeoutMs") == 45000
    assert first.get("maxControlFrameBytes") == 1_000_000


def test_a_worker_is_welcomed_with_prefix_zero(scheduler_under_test: StartScheduler) -> None:
    scheduler = scheduler_under_test("--worker-timeout-seconds", "33")
    welcome = scheduler.peer("worker").register("worker", capacity=4)
    assert welcome.get("idPrefix", 0) == 0
    assert welcome.get("peerTimeoutMs") == 33000


def test_another_protocol_version_is_refused(scheduler_shared_by_the_module: StartScheduler) -> None:
    """§4: version checked before anything else; refused, and not registered."""
    scheduler = scheduler_shared_by_the_module()
    for role in ("client", "worker"):
        peer = scheduler.peer(f"v2-{role}")
        refused = peer.hello(role, capacity=1, version=2)
        assert refused.member == "refused"
        assert "version" in refused.get("reason", "")
        peer.assert_unknown()


def test_a_worker_offering_no_capacity_is_refused(scheduler_shared_by_the_module: StartScheduler) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("no-capacity")
    refused = peer.hello("worker", capacity=0)
    assert refused.member == "refused"
    peer.assert_unknown()


def test_hello_twice_is_a_protocol_error_and_the_first_registration_stays(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("twice")
    peer.register("client")
    again = peer.hello("client")
    assert again.member == "protocolError"
    peer.assert_registered()


def test_a_clients_hello_naming_its_own_prefix_is_welcomed_again_and_its_session_goes_on(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """§23, "Back at a scheduler that still has it": the client moved away and came back before it was dropped."""
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("back")
    prefix = peer.register("client").get("idPrefix")
    peer.send("hello", protocolVersion=wire.PROTOCOL_VERSION, role="client", name="back", idPrefix=prefix)
    again = peer.expect("welcome")
    assert again.get("idPrefix") == prefix
    peer.assert_registered()


def test_a_stores_hello_naming_its_own_data_address_is_welcomed_again_and_it_stays_registered(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """§23, "Back at a scheduler that still has it": a store is welcomed again in place; another address is a breach."""
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("store-back")
    fields = dict(protocolVersion=wire.PROTOCOL_VERSION, role="store", name="store-back", hostKey="host",
                  dataAddress="tcp://127.0.0.1:1", ipcAddress="ipc:///tmp/store-back", capacityBytes=1 << 20)
    peer.send("hello", **fields)
    peer.expect("welcome")
    peer.send("hello", **fields)
    peer.expect("welcome")
    peer.assert_registered()
    peer.send("hello", **{**fields, "dataAddress": "tcp://127.0.0.1:2"})
    assert "hello sent twice" in peer.expect("protocolError").get("reason", "")
    peer.assert_registered()


def test_a_message_before_hello_is_refused(scheduler_shared_by_the_module: StartScheduler) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("stranger")
    peer.send("heartbeat")
    refused = peer.expect("refused")
    assert "unknown peer" in refused.get("reason", "")


def test_heartbeats_are_echoed(scheduler_shared_by_the_module: StartScheduler) -> None:
    """§5: each heartbeat of a registered peer gets a heartbeatEcho."""
    scheduler = scheduler_shared_by_the_module()
    for role, capacity in (("client", 0), ("worker", 2)):
        peer = scheduler.peer(role)
        peer.register(role, capacity)
        for _ in range(3):
            peer.send("heartbeat", cpuPercent=1.0, rssBytes=1000, queuedTasks=0)
            peer.expect("heartbeatEcho")


def test_a_silent_peer_is_dropped_after_its_timeout(scheduler_under_test: StartScheduler) -> None:
    """§5: silent past its timeout, a peer is forgotten without a word; its next message gets refused."""
    scheduler = scheduler_under_test("--worker-timeout-seconds", "1", "--client-timeout-seconds", "1")
    peers = [scheduler.peer("silent-client"), scheduler.peer("silent-worker")]
    peers[0].register("client")
    peers[1].register("worker", capacity=1)
    for peer in peers:
        # Each probe is itself a sign of life, so each one is followed by a longer silence.
        silence, deadline = 2.0, time.monotonic() + LONGEST_WAIT_SECONDS
        while True:
            assert peer.quiet_for(silence) == [], "the scheduler sent something to a silent peer"
            peer.send("heartbeat")
            answer = peer.receive()
            if answer.member == "refused":
                break
            assert answer.member == "heartbeatEcho"
            assert time.monotonic() < deadline, "a silent peer was never dropped"
            silence *= 2


def test_a_peer_the_scheduler_does_not_know_is_told_so_and_a_bad_hello_is_not(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """§21: refused{unknownPeer} answers a message from a peer it does not know (so one welcomed by a scheduler
    before this one says hello again); a refused hello does not set it (that refusal is final)."""
    scheduler = scheduler_shared_by_the_module()
    stranger = scheduler.peer("stranger")
    stranger.send("heartbeat")
    assert stranger.expect("refused").get("unknownPeer") is True
    refused = scheduler.peer("v2").hello("worker", capacity=1, version=2)
    assert refused.member == "refused" and not refused.get("unknownPeer", False)


def test_a_rejoining_worker_gets_work_only_after_it_reannounced_what_it_holds(
    scheduler_under_test: StartScheduler,
) -> None:
    """§21: hello{rejoining} is welcomed, then the scheduler waits for the worker's reannounce before it gives
    it anything: a task it holds already may wait in the queue, re-submitted by its client."""
    scheduler = scheduler_under_test()
    client = scheduler.peer("client")
    client.register("client")
    function = b"an opaque function payload"
    function_id = hashlib.blake2b(function, digest_size=16).digest()
    task_ids = client.next_task_ids(1)
    client.send("submitTasks", objects=[{"objectId": function_id, "name": "f", "payload": function}], groups=[
        {"functionId": function_id, "argsPerTask": 1, "taskIds": task_ids, "args": [b"x"]},
    ])
    worker = scheduler.peer("worker")
    worker.send("hello", protocolVersion=wire.PROTOCOL_VERSION, role="worker", name="rejoining", capacity=4,
                rejoining=True)
    assert worker.receive().member == "welcome"
    assert [message.member for message in worker.quiet_for(0.5)] == []
    worker.send("reannounce", taskIds=[(99 << 32) | 5])
    submission = worker.expect("submitTasks")
    assert submission.get("groups")[0]["taskIds"] == task_ids


def test_a_client_resuming_after_a_restart_keeps_its_prefix_once(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """§4 "Resuming after a restart": hello{idPrefix P} from a client the scheduler does not know is welcomed
    with P, unless this scheduler gave P out already: then refused, and not registered."""
    scheduler = scheduler_shared_by_the_module()
    prefix = 0x5A5A0001
    resumed, twin = scheduler.peer("resumed"), scheduler.peer("twin")
    # One after the other: two connections' hellos sent together reach the scheduler in either order.
    resumed.send("hello", protocolVersion=wire.PROTOCOL_VERSION, role="client", name="resuming", idPrefix=prefix)
    welcome = resumed.expect("welcome")
    assert welcome.get("idPrefix") == prefix
    twin.send("hello", protocolVersion=wire.PROTOCOL_VERSION, role="client", name="resuming", idPrefix=prefix)
    refused = twin.expect("refused")
    assert "is taken" in refused.get("reason", "")
    twin.assert_unknown()
    resumed.assert_registered()
    fresh = scheduler.peer("fresh").register("client")
    assert fresh.get("idPrefix") != prefix
