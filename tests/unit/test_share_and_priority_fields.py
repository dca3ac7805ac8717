"""A client's share and a task's priority: on the wire, at the scheduler's door, and at the user's call.

The scheduler core's use of them (who is served first) is tested with the core; here, that each value
arrives where the core reads it (ClientPeer.share, TaskRecord.priority), what a peer that sends neither
gets, and which values are refused where.
"""

from __future__ import annotations

import math
import os

import capnp
import pytest

from scaler.client.call_priority import call_priority, checked_key_priorities
from scaler.protocol import messages as m
from scaler.protocol.sharing import MAX_PRIORITY, MIN_PRIORITY, checked_priority, checked_share
from scaler.utility.blocking import TASK_PRIORITY_ENVIRONMENT_VARIABLE, set_task_priority
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimulatedCluster

capnp.remove_import_hook()
_schema = capnp.load(os.path.join(os.path.dirname(m.__file__), "scaler.capnp"))


def _group(task_ids: list[int], priority: int = 0) -> m.TaskGroup:
    return m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=0, keywords=(), task_ids=task_ids, args=[], priority=priority
    )


# ---------------------------------------------------------------------------------------------- the wire


@pytest.mark.parametrize("share", [1.0, 2.0, 0.1, 1e-300, 0.0, -1.0, math.inf])
def test_hello_share_round_trips_exactly(share):
    decoded = m.decode(m.encode(m.Hello(role=m.Role.CLIENT, share=share)))
    assert decoded.share == share


@pytest.mark.parametrize("priority", [0, 1, -1, 10, MIN_PRIORITY, MAX_PRIORITY])
def test_group_priority_round_trips(priority):
    submission = m.TaskSubmission(objects=[], groups=[_group([1, 2], priority)])
    (group,) = m.decode(m.encode(submission)).groups
    assert group.priority == priority


def test_a_hello_without_a_share_means_share_one():
    # What an older client, or a peer in another language that knows nothing of shares, sends.
    message = _schema.Message.new_message()
    hello = message.init("hello")
    hello.protocolVersion = m.PROTOCOL_VERSION
    hello.role = "client"
    assert m.decode([message.to_bytes()]).share == 1.0


def test_a_worker_hello_carries_its_concurrency_and_one_when_absent():
    decoded = m.decode(m.encode(m.Hello(role=m.Role.WORKER, capacity=10, concurrency=8)))
    assert decoded.concurrency == 8
    message = _schema.Message.new_message()
    hello = message.init("hello")
    hello.protocolVersion = m.PROTOCOL_VERSION
    hello.role = "worker"
    assert m.decode([message.to_bytes()]).concurrency == 1, "an older worker runs one task at a time"


def test_a_group_without_a_priority_means_priority_zero():
    message = _schema.Message.new_message()
    group = message.init("submitTasks").init("groups", 1)[0]
    group.functionId = FUNCTION_ID
    group.taskIds = [7]
    (decoded,) = m.decode([message.to_bytes()]).groups
    assert decoded.priority == 0


# ---------------------------------------------------------------------------------------------- the scheduler


def _client_hello(share: float) -> m.Hello:
    return m.Hello(role=m.Role.CLIENT, name="c", share=share)


def test_the_scheduler_keeps_the_share_of_each_client():
    cluster = SimulatedCluster()
    cluster.send(b"weighted", _client_hello(2.5))
    cluster.add_client(b"plain")
    assert cluster.core.peers.clients[b"weighted"].share == 2.5
    assert cluster.core.peers.clients[b"plain"].share == 1.0


@pytest.mark.parametrize("share", [0.0, -2.0, math.inf, -math.inf, math.nan])
def test_the_scheduler_refuses_a_client_whose_share_breaks_the_rule(share):
    cluster = SimulatedCluster()
    (reply,) = [message for identity, message in cluster.send(b"bad", _client_hello(share)) if identity == b"bad"]
    assert isinstance(reply, m.Refused)
    assert "share must be a finite number above 0" in reply.reason
    assert b"bad" not in cluster.core.peers.clients


def test_each_task_record_carries_its_group_priority():
    cluster = SimulatedCluster()
    client = cluster.add_client()
    low, high, plain = client.next_task_ids(2), client.next_task_ids(3), client.next_task_ids(1)
    objects = [m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")]
    groups = [_group(low, -4), _group(high, 9), _group(plain)]
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=groups))
    records = cluster.core.tasks.records
    assert [records[task_id].priority for task_id in low + high + plain] == [-4, -4, 9, 9, 9, 0]


def test_dispatched_groups_keep_the_priority_for_the_worker():
    """The worker needs it: a task submitted from inside a task inherits its priority (docs/sharing.md)."""
    cluster = SimulatedCluster()
    client = cluster.add_client()
    task_ids = client.next_task_ids(2)
    objects = [m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")]
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[_group(task_ids, 7)]))
    worker = cluster.add_worker()
    sent = {task_id: group.priority for submission in worker.submissions() for group in submission.groups
            for task_id in group.task_ids}
    assert sent == {task_ids[0]: 7, task_ids[1]: 7}


# ---------------------------------------------------------------------------------------------- the user's call


@pytest.mark.parametrize("bad", ["high", 1.5, True, None])
def test_a_priority_that_is_not_an_int_is_a_type_error(bad):
    with pytest.raises(TypeError, match=r"submit\(\): priority must be an int"):
        checked_priority(bad, "submit()")


@pytest.mark.parametrize("bad", [MIN_PRIORITY - 1, MAX_PRIORITY + 1])
def test_a_priority_outside_int32_is_a_value_error(bad):
    with pytest.raises(ValueError, match="priority must be between"):
        checked_priority(bad, "map()")


@pytest.mark.parametrize("bad", ["2", None, True])
def test_a_share_that_is_not_a_number_is_a_type_error(bad):
    with pytest.raises(TypeError, match="share must be a number"):
        checked_share(bad)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_a_share_not_finite_and_above_zero_is_a_value_error(bad):
    with pytest.raises(ValueError, match="share must be a finite number above 0"):
        checked_share(bad)


def test_without_a_priority_a_call_inside_a_task_takes_the_task_priority(monkeypatch):
    monkeypatch.delenv(TASK_PRIORITY_ENVIRONMENT_VARIABLE, raising=False)
    assert call_priority(None, "submit()") == 0
    set_task_priority(6)  # what the processor does before it runs a task of priority 6
    try:
        assert call_priority(None, "submit()") == 6
        assert call_priority(-2, "submit()") == -2  # given: as given
    finally:
        set_task_priority(0)
    assert TASK_PRIORITY_ENVIRONMENT_VARIABLE not in os.environ


def test_per_key_priorities_are_checked_and_name_the_key():
    assert checked_key_priorities({"x": 3}, "get()") == {"x": 3}
    assert checked_key_priorities(None, "get()") == {}
    with pytest.raises(TypeError, match="key 'x'"):
        checked_key_priorities({"x": "3"}, "get()")
    with pytest.raises(TypeError, match="must map graph keys"):
        checked_key_priorities([("x", 3)], "get()")
