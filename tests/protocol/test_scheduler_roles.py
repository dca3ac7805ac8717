"""Scheduler conformance: messages a role may not send, and frames that do not decode (PROTOCOL.md §3).

The cases marked `role_table` check §3's one answer to a message the sender's role may not send: a
protocolError naming the role and the message, the message ignored, and the sender still registered.

The tests share one scheduler (scheduler_shared_by_the_module): each plays peers of its own, and what one
registers, or has dropped, no other test reads.
"""

from __future__ import annotations

from typing import Callable

import pytest

from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest

StartScheduler = Callable[..., SchedulerUnderTest]

# role, member, fields: answered with protocolError, ignored, and the sender stays registered (§3).
REFUSED_FOR_THE_ROLE = [
    ("worker", "submitTasks", {}),
    ("worker", "deleteObjects", {"objectIds": [b"\x00" * 16]}),
    ("worker", "shutdownRequest", {}),
    ("worker", "drainWorkers", {"workerNames": ["played worker"]}),
    ("client", "taskResults", {}),
    ("client", "cancelRefused", {"taskIds": [1]}),
    ("client", "taskStarted", {"taskIds": [1]}),
]
# members the scheduler never receives, from either role
NEVER_RECEIVED = ["welcome", "refused", "heartbeatEcho", "clearResponse", "shutdownResponse", "protocolError",
                  "processorState", "releaseTasks", "drainWorkersResponse"]


@pytest.mark.role_table
@pytest.mark.parametrize("role, member, fields", REFUSED_FOR_THE_ROLE,
                         ids=[f"{role}-{member}" for role, member, _ in REFUSED_FOR_THE_ROLE])
def test_a_message_the_role_may_not_send(scheduler_shared_by_the_module: StartScheduler, role: str, member: str,
                                         fields: dict) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer(role)
    peer.register(role, capacity=1 if role == "worker" else 0)
    peer.send(member, **fields)
    error = peer.expect("protocolError")
    assert error.get("reason")
    peer.assert_registered()


@pytest.mark.role_table
@pytest.mark.parametrize("member, name", [("cancelTasks", "CancelTasks"), ("clearRequest", "ClearRequest")])
def test_client_requests_from_a_worker_get_a_protocol_error(scheduler_shared_by_the_module: StartScheduler, member: str,
                                                             name: str) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("worker")
    peer.register("worker", capacity=1)
    peer.send(member)
    assert peer.expect("protocolError").get("reason") == f"a worker may not send {name}; only clients do"
    peer.assert_registered()


@pytest.mark.role_table
@pytest.mark.parametrize("member", NEVER_RECEIVED)
def test_a_member_the_scheduler_never_receives(scheduler_shared_by_the_module: StartScheduler, member: str) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("client")
    peer.register("client")
    peer.send(member)
    error = peer.expect("protocolError")
    assert error.get("reason", "").endswith("; the scheduler never receives it")
    peer.assert_registered()


def test_an_undecodable_frame_from_a_registered_peer_drops_it(scheduler_shared_by_the_module: StartScheduler) -> None:
    """§3: protocolError, then disconnect, and the peer is forgotten."""
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("garbled")
    peer.register("worker", capacity=1)
    peer.send_frames([b"this is not a capnp message at all!!!!!!"])
    peer.expect("protocolError")
    assert peer.expect("disconnect").get("reason")
    peer.assert_unknown()


def test_an_undecodable_frame_from_a_stranger_gets_only_a_protocol_error(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("stranger")
    peer.send_frames([wire.with_discriminant(wire.build("heartbeat"), 99)])
    peer.expect("protocolError")
    peer.assert_unknown()


def test_a_rule_breaking_message_keeps_its_sender(scheduler_shared_by_the_module: StartScheduler) -> None:
    """§3: a decodable message that breaks a rule (object ids of 15 bytes) is answered and ignored."""
    scheduler = scheduler_shared_by_the_module()
    peer = scheduler.peer("client")
    peer.register("client")
    peer.send("submitTasks", objects=[{"objectId": b"\x01" * 15, "payload": b"x"}])
    assert "16 bytes" in peer.expect("protocolError").get("reason", "")
    peer.assert_registered()
