"""Which peer may send the scheduler which message (PROTOCOL.md §3), for every message type and every sender.

Every message type of the protocol is sent by a registered client, a registered worker and an unknown
identity, each aimed at real tasks and objects. A message the sender's role may not send gets exactly one
protocolError that names the message and the role, changes nothing in the core, and leaves the sender
registered; one it may send is handled (no protocolError); an unknown identity is refused whatever it
sends, except a hello, which registers it.
"""

from __future__ import annotations

import pytest
from core_harness import FUNCTION_ID, SimulatedCluster
from message_strategies import MESSAGE_TYPES

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.scheduler_core import SchedulerCore

pytestmark = pytest.mark.timeout(60)

# The table, written out independently of scaler/scheduler/core/message_rules.py so that this test checks it.
CLIENT_SENDS = {
    m.Heartbeat, m.Disconnect, m.TaskSubmission, m.CancelTasks, m.ClearRequest, m.DeleteObjects, m.ShutdownRequest,
    m.DrainWorkers,
    m.ObjectsLost, m.Relay,
}
WORKER_SENDS = {
    m.Heartbeat, m.Disconnect, m.TaskResults, m.CancelRefused, m.TaskStarted, m.ObjectsLost, m.TaskOutput, m.Reannounce,
}
STORE_SENDS = {m.Heartbeat, m.Disconnect, m.Relay, m.ObjectsLost, m.ObjectsHeld}
SENDS = {m.Role.CLIENT: CLIENT_SENDS, m.Role.WORKER: WORKER_SENDS, m.Role.STORE: STORE_SENDS}


def sample(kind: type, task_ids: list[int], next_id: int) -> m.Message:
    """A well-formed message of `kind` aimed at the client's real tasks and objects: a role check that let it
    through would change the core."""
    samples: dict[type, m.Message] = {
        m.Hello: m.Hello(role=m.Role.WORKER, name="again", capacity=5),
        m.Welcome: m.Welcome(id_prefix=9),
        m.Refused: m.Refused(reason="no"),
        m.Heartbeat: m.Heartbeat(queued_tasks=3),
        m.HeartbeatEcho: m.HeartbeatEcho(),
        m.TaskSubmission: m.TaskSubmission(objects=[], groups=[m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[next_id], args=[b"x"],
        )]),
        m.TaskResults: m.TaskResults(succeeded_ids=task_ids[:1], payloads=[b"forged"], failures=[
            m.TaskFailure(task_id=task_ids[1], kind=m.FailureKind.WORKER_DIED),
        ]),
        m.CancelTasks: m.CancelTasks(task_ids=task_ids, force=True),
        m.DeleteObjects: m.DeleteObjects(object_ids=[FUNCTION_ID]),
        m.ObjectsLost: m.ObjectsLost(object_ids=[FUNCTION_ID]),
        m.ResendObjects: m.ResendObjects(object_ids=[FUNCTION_ID]),
        m.PublishObjects: m.PublishObjects(object_ids=[FUNCTION_ID]),
        m.ObjectsHeld: m.ObjectsHeld(object_ids=[FUNCTION_ID], sizes=[10]),
        m.ClearRequest: m.ClearRequest(),
        m.ClearResponse: m.ClearResponse(canceled_tasks=2),
        m.Disconnect: m.Disconnect(reason="bye"),
        m.ShutdownRequest: m.ShutdownRequest(),
        m.ShutdownResponse: m.ShutdownResponse(accepted=True),
        m.ProtocolError: m.ProtocolError(reason="you"),
        m.ProcessorState: m.ProcessorState(blocked=True),
        m.ReleaseTasks: m.ReleaseTasks(task_ids=task_ids),
        m.CancelRefused: m.CancelRefused(task_ids=task_ids),
        m.TaskStarted: m.TaskStarted(task_ids=task_ids),
        m.DrainWorkers: m.DrainWorkers(worker_names=["worker-0", "nobody"]),
        m.DrainWorkersResponse: m.DrainWorkersResponse(draining=["worker-0"]),
        m.StoreDirectory: m.StoreDirectory(stores=[m.StoreEntry("tcp://127.0.0.1:1", "ipc:///tmp/s", "b/1")]),
        m.Relay: m.Relay(frames=[b"data message", b"payload"], store="tcp://127.0.0.1:7000", request_id=3),
        m.TaskOutput: m.TaskOutput(task_ids=task_ids[:1], streams=[0], texts=["printed\n"]),
        m.Reannounce: m.Reannounce(task_ids=task_ids),
    }
    return samples[kind]


def state_of(core: SchedulerCore) -> tuple:
    """Everything a message could change, as plain values."""
    return (
        core.should_exit,
        {identity: (client.id_prefix, sorted(client.task_ids), sorted(client.object_ids))
         for identity, client in core.peers.clients.items()},
        {identity: (worker.capacity, list(worker.assigned), sorted(worker.known_object_ids), worker.last_heartbeat)
         for identity, worker in core.peers.workers.items()},
        {task_id: (record.worker.identity if record.worker else None, record.cancel_requested, record.crashes,
                   record.started, record.suspect)
         for task_id, record in core.tasks.records.items()},
        [record.task_id for record in core.tasks.queued_records()],
        {object_id: sorted(stored.owners) for object_id, stored in core.objects.stored.items()},
        dict(core.counters),
        sorted(core.stores.by_address),
    )


def is_registered(core: SchedulerCore, identity: bytes) -> bool:
    return identity in core.peers.clients or identity in core.peers.workers or identity in core.stores.stores


def busy_cluster() -> tuple[SimulatedCluster, bytes, bytes, list[int]]:
    """An unprotected scheduler (so a shutdown would go through), a client with two tasks on a worker, a store."""
    cluster = SimulatedCluster(CoreConfig(protected=False))
    cluster.add_store("tcp://127.0.0.1:7000", identity=b"store")
    worker = cluster.add_worker(capacity=4, store="tcp://127.0.0.1:7000")
    client = cluster.add_client()
    task_ids = cluster.submit(client, 2)
    return cluster, client.identity, worker.identity, task_ids


def test_the_table_names_every_message_type() -> None:
    assert set(MESSAGE_TYPES) >= CLIENT_SENDS | WORKER_SENDS | STORE_SENDS | {m.Hello}


@pytest.mark.parametrize("role", list(m.Role), ids=lambda role: role.name.lower())
@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
def test_a_registered_peer_sends(role: m.Role, kind: type) -> None:
    cluster, client, worker, task_ids = busy_cluster()
    sender = {m.Role.CLIENT: client, m.Role.WORKER: worker, m.Role.STORE: b"store"}[role]
    allowed = kind in SENDS[role]
    next_id = cluster.clients[client].next_task_ids(1)[0]
    before = state_of(cluster.core)

    out = cluster.send(sender, sample(kind, task_ids, next_id))

    errors = [reply for _, reply in out if isinstance(reply, m.ProtocolError)]
    if allowed:
        assert errors == [], out
        return
    assert len(out) == 1 and out[0][0] == sender, out
    (error,) = errors
    role_name = role.name.lower()
    assert f"a {role_name} may not send {kind.__name__}" in error.reason
    assert state_of(cluster.core) == before, "a message its sender may not send changed the scheduler"
    assert is_registered(cluster.core, sender), "the sender is told, not dropped"


@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
def test_an_unknown_sender_is_refused_unless_it_says_hello(kind: type) -> None:
    cluster, _, _, task_ids = busy_cluster()
    before = state_of(cluster.core)

    out = cluster.core.on_message(b"stranger", sample(kind, task_ids, 0), cluster.now)

    to_stranger = [reply for identity, reply in out if identity == b"stranger"]
    if kind is m.Hello:
        assert isinstance(to_stranger[0], m.Welcome) and is_registered(cluster.core, b"stranger")
        return
    reason = "unknown peer: send hello first (or you were timed out, or the scheduler restarted)"
    assert out == [(b"stranger", m.Refused(reason=reason, unknown_peer=True))]
    assert state_of(cluster.core) == before


def test_the_reason_says_who_may_send_it() -> None:
    cluster, client, worker, task_ids = busy_cluster()
    (_, error), = cluster.send(worker, m.CancelTasks(task_ids=task_ids))
    assert error == m.ProtocolError(reason="a worker may not send CancelTasks; only clients do")
    (_, error), = cluster.send(client, m.TaskStarted(task_ids=task_ids))
    assert error == m.ProtocolError(reason="a client may not send TaskStarted; only workers do")
    (_, error), = cluster.send(client, m.ReleaseTasks(task_ids=task_ids))
    assert error == m.ProtocolError(reason="a client may not send ReleaseTasks; the scheduler never receives it")
    (_, error), = cluster.send(worker, m.Hello(role=m.Role.CLIENT))
    assert "hello sent twice" in error.reason
    (_, error), = cluster.send(b"store", m.TaskResults(succeeded_ids=[], payloads=[], failures=[]))
    assert error == m.ProtocolError(reason="a store may not send TaskResults; only workers do")
    (_, error), = cluster.send(b"store", m.DeleteObjects(object_ids=[]))
    assert error == m.ProtocolError(reason="a store may not send DeleteObjects; only clients do")


def test_a_message_its_sender_may_not_send_still_counts_as_a_sign_of_life() -> None:
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=10))
    worker = cluster.add_worker()
    cluster.now += 8
    cluster.send(worker.identity, m.ClearRequest())
    cluster.tick(5)
    assert cluster.core.worker_count == 1
    cluster.tick(6)
    assert cluster.core.worker_count == 0
