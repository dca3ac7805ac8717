"""Unit tests of the scheduler's sans-I/O core, driven by a simulated cluster (see core_harness.py)."""

from __future__ import annotations

import collections

import pytest
from core_harness import (
    FUNCTION_ID,
    FUNCTION_PAYLOAD,
    SimulatedCluster,
    assert_no_task_state,
    payload_for,
)

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.invariants import CoreInvariantError
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.utility.identifiers import TASK_COUNTER_BITS, content_object_id

pytestmark = pytest.mark.timeout(30)

OTHER_PAYLOAD = b"cloudpickled function: lambda x: x * 2"
OTHER_ID = content_object_id(OTHER_PAYLOAD)


def only(out, identity=None, kind=None):
    """The single message of `out` (optionally: addressed to `identity`, of type `kind`)."""
    chosen = [
        message for to, message in out
        if (identity is None or to == identity) and (kind is None or isinstance(message, kind))
    ]
    assert len(chosen) == 1, out
    return chosen[0]


def snapshot(core: SchedulerCore):
    return (
        core.worker_count,
        core.client_count,
        core.task_count,
        core.unassigned_count,
        core.object_count,
        {identity: dict(worker.assigned) for identity, worker in core.peers.workers.items()},
        {identity: set(client.task_ids) for identity, client in core.peers.clients.items()},
    )


def assert_exactly_once(client, task_ids, *, kind=None):
    """Each task got exactly one outcome; `kind` None means success with its own payload."""
    for task_id in task_ids:
        outcomes = client.outcomes.get(task_id, [])
        assert len(outcomes) == 1, f"task {task_id:#x}: {outcomes}"
        status, value = outcomes[0]
        if kind is None:
            assert status == "ok" and value == payload_for(task_id), outcomes
        else:
            assert status == "failed" and value.kind == kind, outcomes


# ---------------------------------------------------------------------------------------------- 1. handshake


def test_each_client_gets_a_welcome_with_its_own_id_prefix():
    config = CoreConfig(heartbeat_interval_seconds=2.5, client_timeout_seconds=30, worker_timeout_seconds=45)
    cluster = SimulatedCluster(config)
    clients = [cluster.add_client() for _ in range(5)]

    welcomes = [client.received(m.Welcome) for client in clients]
    assert all(len(w) == 1 for w in welcomes)
    prefixes = [w[0].id_prefix for w in welcomes]
    assert len(set(prefixes)) == 5 and all(prefix > 0 for prefix in prefixes)
    assert welcomes[0][0].heartbeat_interval_ms == 2500
    assert welcomes[0][0].peer_timeout_ms == 30_000
    assert welcomes[0][0].protocol_version == m.PROTOCOL_VERSION
    assert cluster.core.client_count == 5

    worker = cluster.add_worker(capacity=4)
    (worker_welcome,) = worker.received(m.Welcome)
    assert worker_welcome.peer_timeout_ms == 45_000
    assert cluster.core.worker_count == 1


def test_wrong_protocol_version_is_refused():
    core = SchedulerCore(CoreConfig())
    for role in (m.Role.CLIENT, m.Role.WORKER):
        out = core.on_message(b"peer", m.Hello(role=role, capacity=4, protocol_version=m.PROTOCOL_VERSION + 1), 0.0)
        assert isinstance(only(out, b"peer"), m.Refused)
    assert core.client_count == 0 and core.worker_count == 0


@pytest.mark.parametrize(
    "message",
    [
        m.Heartbeat(),
        m.TaskSubmission(objects=[], groups=[]),
        m.TaskResults(succeeded_ids=[1], payloads=[b"x"], failures=[]),
        m.CancelTasks(task_ids=[1]),
        m.ClearRequest(),
        m.ShutdownRequest(),
    ],
)
def test_message_from_unknown_identity_is_refused(message):
    core = SchedulerCore(CoreConfig(protected=False))
    before = snapshot(core)
    out = core.on_message(b"stranger", message, 0.0)
    assert isinstance(only(out, b"stranger"), m.Refused)
    assert snapshot(core) == before
    assert not core.should_exit


def test_hello_twice_is_a_protocol_error():
    cluster = SimulatedCluster()
    client = cluster.add_client()
    worker = cluster.add_worker()
    for peer in (client, worker):
        for role in (m.Role.CLIENT, m.Role.WORKER):
            for version in (m.PROTOCOL_VERSION, m.PROTOCOL_VERSION + 1):  # a wrong version too: not a refusal
                hello = m.Hello(role=role, capacity=3, protocol_version=version)
                out = cluster.core.on_message(peer.identity, hello, cluster.now)
                assert isinstance(only(out, peer.identity), m.ProtocolError)
    assert cluster.core.client_count == 1 and cluster.core.worker_count == 1
    # The first registration is intact: the client keeps its prefix and can submit.
    ids = cluster.submit(client, 3)
    cluster.run_to_completion()
    assert_exactly_once(client, ids)


def test_worker_with_capacity_zero_is_refused():
    core = SchedulerCore(CoreConfig())
    out = core.on_message(b"w", m.Hello(role=m.Role.WORKER, capacity=0), 0.0)
    assert isinstance(only(out, b"w"), m.Refused)
    assert core.worker_count == 0
    # And it is then unknown.
    out = core.on_message(b"w", m.Heartbeat(), 0.0)
    assert isinstance(only(out, b"w"), m.Refused)


def test_per_worker_queue_size_caps_the_advertised_capacity():
    cluster = SimulatedCluster(CoreConfig(per_worker_queue_size=4))
    big = cluster.add_worker(capacity=100)
    small = cluster.add_worker(capacity=2)
    client = cluster.add_client()
    ids = cluster.submit(client, 50)
    assert len(big.pending) == 4
    assert len(small.pending) == 2
    assert cluster.core.unassigned_count == 44
    cluster.run_to_completion(batch=1)
    assert big.max_pending_seen == 4 and small.max_pending_seen == 2
    assert_exactly_once(client, ids)


def test_heartbeat_is_echoed_and_keeps_the_peer_alive():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=10, client_timeout_seconds=10))
    client = cluster.add_client()
    worker = cluster.add_worker()
    for _ in range(5):
        cluster.now += 6
        out = cluster.send(worker.identity, m.Heartbeat(queued_tasks=0))
        assert isinstance(only(out, worker.identity), m.HeartbeatEcho)
        cluster.send(client.identity, m.Heartbeat())
        cluster.tick()
    assert cluster.core.worker_count == 1 and cluster.core.client_count == 1
    cluster.tick(11)
    assert cluster.core.worker_count == 0 and cluster.core.client_count == 0


# ---------------------------------------------------------------------------------------------- 2. routing


def test_every_task_gets_exactly_one_result_routed_to_its_client():
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=cap) for cap in (50, 100, 250)]
    alice, bob = cluster.add_client(), cluster.add_client()
    submitted = {alice.identity: [], bob.identity: []}
    for round_number in range(10):
        for client in (alice, bob):
            submitted[client.identity] += cluster.submit(client, 200)
        # Workers drain part of the backlog between submissions, in batches of varying sizes.
        for worker in workers:
            cluster.complete(worker, 37 + round_number)
    cluster.run_to_completion(batch=97)

    assert len(submitted[alice.identity]) == len(submitted[bob.identity]) == 2000
    for client in (alice, bob):
        assert_exactly_once(client, submitted[client.identity])
        assert set(client.outcomes) == set(submitted[client.identity]), "a result went to the wrong client"
    assert sum(len(w.received_task_ids) for w in workers) == 4000, "a task was dispatched twice"
    assert_no_task_state(cluster.core)
    assert cluster.core.tasks.queue_entries() == 0
    assert cluster.stray == []


def test_failures_are_routed_exactly_once_too():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1000)
    alice, bob = cluster.add_client(), cluster.add_client()
    ids_a = cluster.submit(alice, 20)
    ids_b = cluster.submit(bob, 20)
    raised = [task_id for task_id in ids_a + ids_b if task_id % 3 == 0]
    cluster.complete(worker, task_ids=raised, failure_kind=m.FailureKind.RAISED)
    cluster.complete(worker)
    for client, ids in ((alice, ids_a), (bob, ids_b)):
        assert_exactly_once(client, [t for t in ids if t not in raised])
        assert_exactly_once(client, [t for t in ids if t in raised], kind=m.FailureKind.RAISED)
        assert set(client.outcomes) == set(ids)
    assert_no_task_state(cluster.core)


def test_duplicate_and_unknown_results_from_a_worker_are_ignored():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    other = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 10)
    mine = list(worker.pending)
    theirs = list(other.pending)
    assert mine and theirs
    # A worker reporting a task it does not hold must not finish it.
    cluster.send(worker.identity, m.TaskResults(succeeded_ids=theirs, payloads=[b"bogus"] * len(theirs), failures=[]))
    cluster.send(worker.identity, m.TaskResults(succeeded_ids=[123456789], payloads=[b"?"], failures=[]))
    assert client.outcomes == {}
    cluster.complete(worker)
    cluster.send(worker.identity, m.TaskResults(succeeded_ids=mine, payloads=[b"again"] * len(mine), failures=[]))
    cluster.complete(other)
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


# ---------------------------------------------------------------------------------------------- 3. dispatch


def test_dispatch_never_exceeds_a_workers_capacity():
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=cap) for cap in (1, 2, 5, 7)]
    client = cluster.add_client()
    ids = cluster.submit(client, 300)
    steps = 0
    while any(w.pending for w in workers):
        for worker in workers:
            core_worker = cluster.core.peers.workers[worker.identity]
            assert len(worker.pending) <= worker.capacity
            assert len(core_worker.assigned) <= core_worker.capacity
            assert set(core_worker.assigned) == set(worker.pending)
            if worker.pending and (steps + worker.capacity) % 2 == 0:
                cluster.complete(worker, 1)
        steps += 1
    for worker in workers:
        assert worker.max_pending_seen == worker.capacity
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


def test_a_batch_is_spread_evenly_over_idle_workers():
    cluster = SimulatedCluster()
    first, second = cluster.add_worker(capacity=1000), cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 10)
    assert len(first.pending) == 5 and len(second.pending) == 5


def test_tasks_submitted_one_at_a_time_are_spread_over_idle_workers():
    """`client.submit` in a loop sends one task per message; all idle workers should share them."""
    cluster = SimulatedCluster()
    first, second = cluster.add_worker(capacity=1000), cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    for _ in range(10):
        cluster.submit(client, 1)
    loads = sorted((len(first.pending), len(second.pending)))
    assert loads[1] - loads[0] <= 1, f"loads {loads}: one worker got everything while the other idled"


def test_function_object_is_sent_to_each_worker_only_once():
    cluster = SimulatedCluster()
    first, second = cluster.add_worker(capacity=3), cluster.add_worker(capacity=3)
    client = cluster.add_client()
    ids = cluster.submit(client, 20)
    ids += cluster.submit(client, 20)
    cluster.run_to_completion(batch=2)
    assert_exactly_once(client, ids)
    for worker in (first, second):
        submissions = worker.submissions()
        assert len(submissions) > 2
        assert [o.object_id for o in submissions[0].objects] == [FUNCTION_ID]
        assert submissions[0].objects[0].payload == FUNCTION_PAYLOAD
        assert all(s.objects == [] for s in submissions[1:])

    # A second function is shipped with its first use, once per worker, and the first is not resent.
    more = cluster.submit(client, 6, function_payload=OTHER_PAYLOAD)
    cluster.run_to_completion(batch=1)
    assert_exactly_once(client, more)
    for worker in (first, second):
        shipped = [o.object_id for s in worker.submissions() for o in s.objects]
        assert shipped == [FUNCTION_ID, OTHER_ID]


def test_serializer_object_is_shipped_with_the_function_once():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    client = cluster.add_client()
    serializer = m.ObjectPayload(object_id=b"S" * 16, payload=b"serializer", name="ser")
    function = m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")
    ids = client.next_task_ids(3)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=0, keywords=(), task_ids=ids, args=[], serializer_id=b"S" * 16
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[serializer, function], groups=[group]))
    cluster.run_to_completion(batch=1)
    assert_exactly_once(client, ids)
    shipped = [o.object_id for s in worker.submissions() for o in s.objects]
    assert sorted(shipped) == sorted([b"S" * 16, FUNCTION_ID])
    assert all(g.serializer_id == b"S" * 16 for s in worker.submissions() for g in s.groups)


def test_arguments_and_keywords_reach_the_worker_with_their_task():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=100)
    client = cluster.add_client()
    ids = client.next_task_ids(4)
    args = [b"%d-%d" % (t, i) for t in ids for i in range(3)]
    group = m.TaskGroup(function_id=FUNCTION_ID, args_per_task=3, keywords=("k",), task_ids=ids, args=args)
    function = m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD)
    cluster.send(client.identity, m.TaskSubmission(objects=[function], groups=[group]))
    (submission,) = worker.submissions()
    (sent,) = submission.groups
    assert sent.task_ids == ids and sent.args == args and sent.keywords == ("k",) and sent.args_per_task == 3


# ---------------------------------------------------------------------------------------------- 4. rejections


def _group(task_ids, *, function_id=FUNCTION_ID, args_per_task=1, args=None, keywords=()):
    if args is None:
        args = [b"a"] * (args_per_task * len(task_ids))
    return m.TaskGroup(
        function_id=function_id, args_per_task=args_per_task, keywords=keywords, task_ids=task_ids, args=args
    )


def _function():
    return m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")


def _assert_rejected(client, ids):
    for task_id in ids:
        assert [s for s, f in client.outcomes[task_id]] == ["failed"], client.outcomes[task_id]
        failure = client.outcomes[task_id][0][1]
        assert failure.kind == m.FailureKind.REJECTED and failure.message


def _assert_keeps_serving(cluster, client):
    ids = cluster.submit(client, 5, send_object=True)
    cluster.run_to_completion()
    assert_exactly_once(client, ids)


@pytest.mark.parametrize(
    "make_group",
    [
        pytest.param(lambda ids: _group(ids, args_per_task=2, args=[b"a"] * (2 * len(ids) - 1)), id="args-count"),
        pytest.param(lambda ids: _group(ids, args_per_task=1, keywords=("x", "y")), id="too-many-keywords"),
        pytest.param(lambda ids: _group(ids, function_id=b"F" * 16), id="unknown-function"),
        pytest.param(
            lambda ids: m.TaskGroup(FUNCTION_ID, 1, (), ids, [b"a"] * len(ids), serializer_id=b"Z" * 16),
            id="unknown-serializer",
        ),
    ],
)
def test_malformed_group_is_rejected_and_the_core_keeps_serving(make_group):
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=100)
    client = cluster.add_client()
    ids = client.next_task_ids(4)
    cluster.send(client.identity, m.TaskSubmission(objects=[_function()], groups=[make_group(ids)]))
    _assert_rejected(client, ids)
    assert worker.pending == {}
    assert cluster.core.task_count == 0
    _assert_keeps_serving(cluster, client)


def test_function_is_unknown_until_its_payload_is_sent():
    cluster = SimulatedCluster()
    cluster.add_worker()
    client = cluster.add_client()
    ids = cluster.submit(client, 3, send_object=False)
    _assert_rejected(client, ids)
    _assert_keeps_serving(cluster, client)


def test_foreign_id_prefix_is_rejected():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=100)
    alice, bob = cluster.add_client(), cluster.add_client()
    stolen = [(bob.prefix << TASK_COUNTER_BITS) | 7, (bob.prefix << TASK_COUNTER_BITS) | 8]
    cluster.submit(alice, 0, task_ids=stolen)
    _assert_rejected(alice, stolen)
    assert bob.inbox[1:] == [] and worker.pending == {}
    # A mix of own and foreign ids rejects the group as a whole.
    mixed = alice.next_task_ids(2) + [(bob.prefix << TASK_COUNTER_BITS) | 9]
    cluster.submit(alice, 0, task_ids=mixed)
    _assert_rejected(alice, mixed)
    assert cluster.core.task_count == 0
    _assert_keeps_serving(cluster, alice)


def test_duplicate_task_id_is_rejected_while_the_original_runs():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=100)
    client = cluster.add_client()
    (task_id,) = cluster.submit(client, 1)
    cluster.submit(client, 0, task_ids=[task_id])
    assert [f.kind for f in client.failures()] == [m.FailureKind.REJECTED]
    assert worker.received_task_ids == [task_id]
    cluster.complete(worker)
    outcomes = [status for status, _ in client.outcomes[task_id]]
    assert outcomes == ["failed", "ok"]  # the rejection of the copy, then the original's result
    assert_no_task_state(cluster.core)
    _assert_keeps_serving(cluster, client)


def test_duplicate_task_id_within_one_group_is_rejected():
    cluster = SimulatedCluster()
    first, second = cluster.add_worker(capacity=100), cluster.add_worker(capacity=100)
    client = cluster.add_client()
    (task_id,) = client.next_task_ids(1)
    cluster.submit(client, 0, task_ids=[task_id, task_id])
    assert {f.kind for f in client.failures()} == {m.FailureKind.REJECTED}, (
        f"a group naming task {task_id:#x} twice was accepted; "
        f"first worker got {list(first.pending)}, second got {list(second.pending)}"
    )
    assert cluster.core.task_count == 0
    for worker in cluster.core.workers():
        assert worker.assigned == {}


def test_queue_limit_rejects_tasks_beyond_max_tasks_waiting():
    cluster = SimulatedCluster(CoreConfig(max_number_of_tasks_waiting=10))
    client = cluster.add_client()
    accepted = cluster.submit(client, 8)
    too_many = cluster.submit(client, 3)
    _assert_rejected(client, too_many)
    assert all(client.outcomes.get(t) is None for t in accepted)
    fits = cluster.submit(client, 2)
    assert cluster.core.unassigned_count == 10
    cluster.add_worker(capacity=100)
    cluster.run_to_completion()
    assert_exactly_once(client, accepted + fits)
    assert_no_task_state(cluster.core)


def test_canceled_tasks_do_not_count_against_max_tasks_waiting():
    cluster = SimulatedCluster(CoreConfig(max_number_of_tasks_waiting=10))
    client = cluster.add_client()
    ids = cluster.submit(client, 10)
    cluster.cancel(client, ids)
    assert cluster.core.unassigned_count == 0 and cluster.core.task_count == 0
    more = cluster.submit(client, 5)
    assert client.failures(m.FailureKind.REJECTED) == [], "the queue is empty, yet new tasks were rejected as full"
    assert cluster.core.unassigned_count == 5
    worker = cluster.add_worker(capacity=10)
    assert sorted(worker.pending) == sorted(more)


def test_a_rejected_group_does_not_affect_the_other_groups_of_a_submission():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=100)
    client = cluster.add_client()
    good = client.next_task_ids(3)
    bad = client.next_task_ids(2)
    submission = m.TaskSubmission(
        objects=[_function()], groups=[_group(good), _group(bad, function_id=b"?" * 16)]
    )
    cluster.send(client.identity, submission)
    _assert_rejected(client, bad)
    assert set(worker.pending) == set(good)
    cluster.complete(worker)
    assert_exactly_once(client, good)


# ---------------------------------------------------------------------------------------------- 5. worker timeout


def test_timed_out_workers_tasks_are_redispatched_and_late_results_refused():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=10, client_timeout_seconds=100))
    doomed = cluster.add_worker(capacity=100)
    survivors = [cluster.add_worker(capacity=100) for _ in range(2)]
    client = cluster.add_client()
    ids = cluster.submit(client, 30)
    held = list(doomed.pending)
    assert len(held) == 10
    cluster.complete(doomed, 3)  # some finish before it goes silent
    still_held = list(doomed.pending)

    cluster.now += 11
    cluster.heartbeat_all(except_for=[doomed.identity])
    cluster.tick()
    assert cluster.core.worker_count == 2
    redispatched = [t for w in survivors for t in w.pending if t in still_held]
    assert sorted(redispatched) == sorted(still_held)

    # The dead worker's late answers: refused, and not delivered to the client.
    out = cluster.complete(doomed)
    assert isinstance(only(out, doomed.identity), m.Refused)
    assert all(to == doomed.identity for to, _ in out)
    assert all(client.outcomes.get(t) is None for t in still_held)

    cluster.run_to_completion(batch=4)
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


def test_tasks_of_a_timed_out_worker_wait_for_the_next_worker():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=100))
    doomed = cluster.add_worker(capacity=4)
    client = cluster.add_client()
    ids = cluster.submit(client, 10)
    first_four = list(doomed.pending)
    cluster.forget_worker(doomed)
    cluster.now += 6
    cluster.send(client.identity, m.Heartbeat())
    cluster.tick()
    assert cluster.core.worker_count == 0
    assert cluster.core.unassigned_count == 10 and cluster.core.task_count == 10
    replacement = cluster.add_worker(capacity=4)
    # Oldest first: the dead worker's tasks go out before the ones that were still waiting.
    assert list(replacement.pending) == first_four
    cluster.run_to_completion(batch=3)
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


def test_worker_disconnect_redispatches_its_tasks():
    cluster = SimulatedCluster()
    leaving, staying = cluster.add_worker(capacity=50), cluster.add_worker(capacity=50)
    client = cluster.add_client()
    ids = cluster.submit(client, 40)
    held = set(leaving.pending)
    cluster.send(leaving.identity, m.Disconnect(reason="bye"))
    cluster.forget_worker(leaving)
    assert held <= set(staying.pending)
    cluster.run_to_completion()
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


def test_a_worker_whose_connection_was_lost_has_its_tasks_redispatched_before_its_timeout():
    """The router saw its process end the connection and not come back (router_link.take_lost): no waiting for
    the worker timeout, a minute by default."""
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=60, client_timeout_seconds=100))
    doomed, staying = cluster.add_worker(capacity=50), cluster.add_worker(capacity=50)
    client = cluster.add_client()
    ids = cluster.submit(client, 40)
    held = set(doomed.pending)
    assert held
    cluster.forget_worker(doomed)
    cluster.now += 1
    out = cluster.lose_connections([doomed.identity, b"W|never-registered"])
    assert cluster.core.worker_count == 1 and held <= set(staying.pending)
    assert not any(to == b"W|never-registered" for to, _ in out)
    cluster.run_to_completion()
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


def test_a_client_whose_connection_was_lost_is_cleaned_up_like_a_disconnect():
    cluster, workers, alice, bob, alice_ids, bob_ids = _two_clients_with_work()
    out = cluster.lose_connections([alice.identity])
    assert cluster.core.client_count == 1
    _check_alice_cleaned_up(cluster, workers, alice, bob, alice_ids, bob_ids, out)


def test_a_worker_that_reconnects_after_timeout_starts_afresh():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=100))
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 5)
    cluster.now += 6
    cluster.send(client.identity, m.Heartbeat())
    cluster.tick()
    assert cluster.core.worker_count == 0
    stale = dict(worker.pending)
    worker.pending.clear()
    # Same identity says hello again (a restarted worker): it is welcomed and gets the tasks again,
    # with the function object, since its memory of objects is gone.
    cluster.send(worker.identity, m.Hello(role=m.Role.WORKER, capacity=10))
    assert set(worker.pending) == set(stale)
    assert [o.object_id for o in worker.submissions()[-1].objects] == [FUNCTION_ID]
    cluster.complete(worker)
    assert_exactly_once(client, ids)


# ---------------------------------------------------------------------------------------------- 6. processor crash


def test_a_task_whose_processor_died_is_retried_then_fails_after_max_task_crashes():
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=5) for _ in range(2)]
    client = cluster.add_client()
    ids = cluster.submit(client, 4)
    crashing = ids[0]
    deliveries = 0
    for attempt in range(1, 4):
        (holder,) = [w for w in workers if crashing in w.pending]
        deliveries += 1
        cluster.complete(holder, task_ids=[crashing], failure_kind=m.FailureKind.WORKER_DIED)
        if attempt < 3:
            assert client.outcomes.get(crashing) is None, f"gave up after {attempt} crash(es)"
            assert any(crashing in w.pending for w in workers), "crashed task was not retried"
    assert_exactly_once(client, [crashing], kind=m.FailureKind.WORKER_DIED)
    assert sum(w.received_task_ids.count(crashing) for w in workers) == 3
    assert not any(crashing in w.pending for w in workers)
    cluster.run_to_completion()
    assert_exactly_once(client, ids[1:])
    assert_no_task_state(cluster.core)


def test_max_task_crashes_is_configurable():
    cluster = SimulatedCluster(CoreConfig(max_task_crashes=1))
    worker = cluster.add_worker(capacity=5)
    client = cluster.add_client()
    (task_id,) = cluster.submit(client, 1)
    cluster.complete(worker, failure_kind=m.FailureKind.WORKER_DIED)
    assert_exactly_once(client, [task_id], kind=m.FailureKind.WORKER_DIED)
    assert worker.received_task_ids == [task_id]
    assert_no_task_state(cluster.core)


def test_crash_counts_are_per_task():
    cluster = SimulatedCluster(CoreConfig(max_task_crashes=2))
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    a, b = cluster.submit(client, 2)
    cluster.complete(worker, task_ids=[a], failure_kind=m.FailureKind.WORKER_DIED)
    cluster.complete(worker, task_ids=[b], failure_kind=m.FailureKind.WORKER_DIED)
    assert client.outcomes == {}
    cluster.complete(worker, task_ids=[a], failure_kind=m.FailureKind.WORKER_DIED)
    cluster.complete(worker, task_ids=[b])
    assert_exactly_once(client, [a], kind=m.FailureKind.WORKER_DIED)
    assert_exactly_once(client, [b])


def _die(cluster, worker, timeout):
    """The worker's process is gone: it falls silent and the scheduler times it out."""
    cluster.forget_worker(worker)
    cluster.now += timeout + 1
    cluster.heartbeat_all()
    cluster.tick()


def _report_start_groups(worker, task_id):
    """The report-start flag of every group that handed `task_id` to `worker`."""
    return [
        group.report_start for submission in worker.submissions() for group in submission.groups
        if task_id in group.task_ids
    ]


def test_a_task_that_kills_every_worker_it_starts_on_fails_after_max_task_crashes_deaths():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=1000, max_task_crashes=3))
    workers = [cluster.add_worker(capacity=10) for _ in range(4)]
    client = cluster.add_client()
    ids = cluster.submit(client, 12)
    killer = ids[0]
    (holder,) = [w for w in workers if killer in w.pending]
    assert _report_start_groups(holder, killer) == [False]  # nothing is suspect before a death
    bystanders = [t for t in holder.pending if t != killer]
    _die(cluster, holder, 5)  # nobody knows which task did it: all of its tasks become suspects
    assert client.outcomes.get(killer) is None

    for death in (2, 3):
        (holder,) = [w for w in cluster.workers.values() if killer in w.pending]
        assert _report_start_groups(holder, killer) == [True]
        out = cluster.send(holder.identity, m.TaskStarted(task_ids=[killer]))
        assert out == [(holder.identity, m.TaskStarted(task_ids=[killer]))]
        _die(cluster, holder, 5)
        if death < 3:
            assert client.outcomes.get(killer) is None, f"gave up after {death} deaths"

    assert_exactly_once(client, [killer], kind=m.FailureKind.WORKER_DIED)
    failure = client.outcomes[killer][0][1]
    assert "3 times" in failure.message and "--max-task-crashes 3" in failure.message
    assert cluster.core.worker_count == 1  # three deaths, not the whole cluster
    # The tasks that shared a dead worker with it were never reported started there: they run to the end.
    cluster.run_to_completion()
    assert_exactly_once(client, [t for t in ids if t != killer])
    assert bystanders
    for task_id in bystanders:  # sent once plainly, then only as a suspect
        flags = [flag for worker in workers for flag in _report_start_groups(worker, task_id)]
        assert len(flags) >= 2 and sorted(flags) == [False] + [True] * (len(flags) - 1), flags
    assert_no_task_state(cluster.core)


def test_a_suspect_is_blamed_only_for_deaths_of_workers_that_reported_it_started():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=1000, max_task_crashes=3))
    first = cluster.add_worker(capacity=2)
    client = cluster.add_client()
    a, b = cluster.submit(client, 2)
    _die(cluster, first, 5)
    records = cluster.core.tasks.records
    assert records[a].suspect and records[b].suspect and records[a].crashes == records[b].crashes == 0

    second = cluster.add_worker(capacity=2)
    assert _report_start_groups(second, a) == [True] and _report_start_groups(second, b) == [True]
    cluster.send(second.identity, m.TaskStarted(task_ids=[a]))
    _die(cluster, second, 5)
    # a was running: blamed for this death and the one that made it a suspect. b was only queued there.
    assert records[a].crashes == 2 and records[b].crashes == 0

    third = cluster.add_worker(capacity=2)
    cluster.send(third.identity, m.TaskStarted(task_ids=[b]))
    _die(cluster, third, 5)
    assert records[a].crashes == 2 and records[b].crashes == 2
    assert client.outcomes == {}

    last = cluster.add_worker(capacity=2)
    cluster.complete(last)
    assert_exactly_once(client, [a, b])
    assert_no_task_state(cluster.core)


def test_a_processor_crash_and_a_worker_death_count_together():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=1000, max_task_crashes=3))
    first = cluster.add_worker(capacity=1)
    client = cluster.add_client()
    (task_id,) = cluster.submit(client, 1)
    cluster.complete(first, failure_kind=m.FailureKind.WORKER_DIED)  # its processor crashed: exactly blamed
    _die(cluster, first, 5)  # then the whole worker died while holding it again
    second = cluster.add_worker(capacity=1)
    cluster.send(second.identity, m.TaskStarted(task_ids=[task_id]))
    _die(cluster, second, 5)
    assert_exactly_once(client, [task_id], kind=m.FailureKind.WORKER_DIED)
    assert_no_task_state(cluster.core)


def test_task_started_is_answered_only_for_the_senders_own_tasks():
    cluster = SimulatedCluster()
    worker, other = cluster.add_worker(capacity=1), cluster.add_worker(capacity=1)
    client = cluster.add_client()
    mine, theirs = cluster.submit(client, 2)
    if mine not in worker.pending:
        mine, theirs = theirs, mine
    out = cluster.send(worker.identity, m.TaskStarted(task_ids=[theirs, mine, 12345]))
    assert out == [(worker.identity, m.TaskStarted(task_ids=[mine]))]
    assert not cluster.core.tasks.records[theirs].started
    assert cluster.send(worker.identity, m.TaskStarted(task_ids=[theirs])) == []
    error = only(cluster.send(client.identity, m.TaskStarted(task_ids=[mine])), client.identity)
    assert isinstance(error, m.ProtocolError)
    cluster.complete(worker)
    cluster.complete(other)
    assert_exactly_once(client, [mine, theirs])


@pytest.mark.skipif(not hasattr(m.FailureKind, "RETURNED"), reason="protocol has no RETURNED failure kind")
def test_returned_tasks_go_back_to_the_front_without_counting_a_crash():
    cluster = SimulatedCluster(CoreConfig(max_task_crashes=1))
    worker = cluster.add_worker(capacity=2)
    client = cluster.add_client()
    ids = cluster.submit(client, 6)
    first_two = list(worker.pending)
    assert first_two == ids[:2]
    # Returned many more times than max_task_crashes allows crashes: still never fails.
    for _ in range(5):
        cluster.complete(worker, task_ids=[ids[0]], failure_kind=m.FailureKind.RETURNED)
        assert client.outcomes == {}
        assert ids[0] in worker.pending, "a returned task should go out again ahead of the waiting ones"
        assert set(worker.pending) == {ids[0], ids[1]}
    cluster.run_to_completion(batch=1)
    assert_exactly_once(client, ids)
    assert_no_task_state(cluster.core)


@pytest.mark.skipif(not hasattr(m.FailureKind, "RETURNED"), reason="protocol has no RETURNED failure kind")
def test_several_returned_tasks_keep_their_order():
    """A worker hands back everything its dead processor held; those tasks should run in submission order."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=3)
    client = cluster.add_client()
    ids = cluster.submit(client, 9)
    handed_back = list(worker.pending)
    assert handed_back == ids[:3]
    cluster.complete(worker, task_ids=handed_back, failure_kind=m.FailureKind.RETURNED)
    # The worker gets its three slots back and is handed the returned tasks again, before ids[3:].
    assert list(worker.pending) == handed_back
    cluster.run_to_completion(batch=1)
    assert_exactly_once(client, ids)


@pytest.mark.parametrize("queued_on_one", [2, 3])
def test_a_worker_gives_its_queued_tasks_to_a_worker_that_has_none(queued_on_one):
    """Even one task queued behind a running one moves to an idle worker; else it waits for that task to end."""
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=1.0, load_balance_trigger_times=2))
    busy = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, queued_on_one)
    assert list(busy.pending) == ids
    idle = cluster.add_worker(capacity=10)
    for _ in range(3):
        cluster.tick(1.0)
    (release,) = busy.received(m.ReleaseTasks)
    assert release.task_ids == ids[-1:], "the newest task, down to the mean rounded up"
    cluster.complete(busy, task_ids=release.task_ids, failure_kind=m.FailureKind.RETURNED)
    assert list(idle.pending) == ids[-1:]
    cluster.run_to_completion(batch=1)
    assert_exactly_once(client, ids)


def test_balanced_enough_workers_keep_their_tasks():
    cluster = SimulatedCluster(CoreConfig(load_balance_seconds=1.0, load_balance_trigger_times=1))
    workers = [cluster.add_worker(capacity=10) for _ in range(2)]
    client = cluster.add_client()
    cluster.submit(client, 3)  # two on one worker, one on the other
    for _ in range(5):
        cluster.tick(1.0)
    assert all(not worker.received(m.ReleaseTasks) for worker in workers)


# ---------------------------------------------------------------------------------------------- 7. cancel


def test_canceling_an_unassigned_task_answers_canceled_at_once_and_never_dispatches_it():
    cluster = SimulatedCluster()
    client = cluster.add_client()
    ids = cluster.submit(client, 6)
    canceled = ids[::2]
    out = cluster.cancel(client, canceled)
    assert all(to == client.identity for to, _ in out)
    assert_exactly_once(client, canceled, kind=m.FailureKind.CANCELED)
    assert cluster.core.task_count == 3 and cluster.core.unassigned_count == 3
    worker = cluster.add_worker(capacity=100)
    assert sorted(worker.received_task_ids) == sorted(ids[1::2])
    cluster.run_to_completion()
    assert_exactly_once(client, ids[1::2])
    assert_exactly_once(client, canceled, kind=m.FailureKind.CANCELED)
    assert_no_task_state(cluster.core)
    assert cluster.core.tasks.queue_entries() == 0


def test_canceling_an_assigned_task_forwards_cancel_to_its_worker():
    cluster = SimulatedCluster()
    first, second = cluster.add_worker(capacity=10), cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 8)
    on_first, on_second = list(first.pending)[:2], list(second.pending)[:1]
    out = cluster.cancel(client, on_first + on_second)
    assert only(out, first.identity, m.CancelTasks).task_ids == on_first
    assert only(out, second.identity, m.CancelTasks).task_ids == on_second
    assert client.outcomes == {}, "the worker decides whether a running task can still be canceled"
    # The workers confirm; the client hears CANCELED once per task.
    cluster.complete(first, task_ids=on_first, failure_kind=m.FailureKind.CANCELED)
    cluster.complete(second, task_ids=on_second, failure_kind=m.FailureKind.CANCELED)
    assert_exactly_once(client, on_first + on_second, kind=m.FailureKind.CANCELED)
    cluster.run_to_completion()
    assert_exactly_once(client, [t for t in ids if t not in on_first + on_second])
    assert_no_task_state(cluster.core)


def test_canceling_unknown_or_foreign_ids_answers_not_found():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    alice, bob = cluster.add_client(), cluster.add_client()
    bobs = cluster.submit(bob, 2)
    unknown = [(alice.prefix << TASK_COUNTER_BITS) | 999, 42]
    out = cluster.cancel(alice, unknown + bobs)
    assert_exactly_once(alice, unknown + bobs, kind=m.FailureKind.NOT_FOUND)
    assert not any(isinstance(message, m.CancelTasks) for _, message in out)
    # Bob's tasks are untouched.
    cluster.complete(worker)
    assert_exactly_once(bob, bobs)


def test_canceled_task_is_not_rerun_when_its_worker_dies_before_confirming():
    cluster = SimulatedCluster(CoreConfig(worker_timeout_seconds=5, client_timeout_seconds=100))
    doomed, spare = cluster.add_worker(capacity=1), cluster.add_worker(capacity=1)
    client = cluster.add_client()
    ids = cluster.submit(client, 2)
    (task_id,) = list(doomed.pending)
    cluster.cancel(client, [task_id])
    cluster.complete(spare)
    cluster.forget_worker(doomed)
    cluster.now += 6
    cluster.heartbeat_all()
    cluster.tick()
    cluster.run_to_completion()
    assert task_id not in spare.received_task_ids, "a canceled task was dispatched again"
    assert_exactly_once(client, [task_id], kind=m.FailureKind.CANCELED)
    assert_exactly_once(client, [t for t in ids if t != task_id])


# ---------------------------------------------------------------------------------------------- 8. clear, disconnect


def _two_clients_with_work(config=None):
    """Alice and Bob share one function; Alice also uploaded a private object. Some tasks wait."""
    cluster = SimulatedCluster(config or CoreConfig(client_timeout_seconds=10, worker_timeout_seconds=100))
    workers = [cluster.add_worker(capacity=4) for _ in range(2)]
    alice, bob = cluster.add_client(), cluster.add_client()
    alice_ids = cluster.submit(alice, 5)
    alice_ids += cluster.submit(alice, 3, function_payload=OTHER_PAYLOAD)
    bob_ids = cluster.submit(bob, 6)
    assert cluster.core.unassigned_count > 0
    return cluster, workers, alice, bob, alice_ids, bob_ids


def _check_alice_cleaned_up(cluster, workers, alice, bob, alice_ids, bob_ids, out):
    alice_assigned = {w.identity: [t for t in w.pending if t in alice_ids] for w in workers}
    for worker in workers:
        cancels = [msg for to, msg in out if to == worker.identity and isinstance(msg, m.CancelTasks)]
        if alice_assigned[worker.identity]:
            (cancel,) = cancels
            assert sorted(cancel.task_ids) == sorted(alice_assigned[worker.identity])
        else:
            assert cancels == []
        # Only Alice's private function is deleted; the shared one is still Bob's.
        deletes = [msg for to, msg in out if to == worker.identity and isinstance(msg, m.DeleteObjects)]
        if OTHER_ID in worker.objects or any(OTHER_ID in d.object_ids for d in deletes):
            (delete,) = deletes
            assert delete.object_ids == [OTHER_ID]
        else:
            assert deletes == []
        assert FUNCTION_ID in worker.objects
    assert cluster.core.object_count == 1
    assert not any(t in core_worker.assigned for core_worker in cluster.core.workers() for t in alice_ids)
    assert all(cluster.core.tasks.records[t].client.identity == bob.identity for t in cluster.core.tasks.records)

    # Workers confirm the cancels (or report late results); none of it reaches Alice.
    alice_outcomes = {t: list(v) for t, v in alice.outcomes.items()}
    for worker in workers:
        mine = [t for t in worker.pending if t in alice_ids]
        if mine:
            cluster.complete(worker, task_ids=mine[:1], failure_kind=m.FailureKind.CANCELED)
            cluster.complete(worker, task_ids=mine[1:])
    assert {t: list(v) for t, v in alice.outcomes.items()} == alice_outcomes
    # Bob's work completes, every task once, none of them canceled.
    cluster.run_to_completion(batch=1)
    assert_exactly_once(bob, bob_ids)
    assert_no_task_state(cluster.core)
    assert all(w.received_task_ids.count(t) <= 1 for w in workers for t in bob_ids)


def test_clear_cancels_the_clients_tasks_and_frees_its_objects_only():
    cluster, workers, alice, bob, alice_ids, bob_ids = _two_clients_with_work()
    unfinished = len([t for t in alice_ids if t in cluster.core.tasks.records])
    out = cluster.send(alice.identity, m.ClearRequest())
    assert only(out, alice.identity, m.ClearResponse).canceled_tasks == unfinished == 8
    assert cluster.core.client_count == 2
    _check_alice_cleaned_up(cluster, workers, alice, bob, alice_ids, bob_ids, out)
    # Alice can keep working after a clear, and must resend her function.
    more = cluster.submit(alice, 2, send_object=True)
    cluster.run_to_completion()
    assert_exactly_once(alice, more)


def test_clear_counts_only_unfinished_tasks():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=3)
    client = cluster.add_client()
    cluster.submit(client, 5)
    cluster.complete(worker, 2)
    out = cluster.send(client.identity, m.ClearRequest())
    assert only(out, client.identity, m.ClearResponse).canceled_tasks == 3
    assert_no_task_state(cluster.core)
    assert cluster.core.object_count == 0
    assert only(out, worker.identity, m.DeleteObjects).object_ids == [FUNCTION_ID]


def test_client_timeout_cleans_up_like_clear():
    cluster, workers, alice, bob, alice_ids, bob_ids = _two_clients_with_work()
    cluster.now += 11
    cluster.heartbeat_all(except_for=[alice.identity])
    out = cluster.tick()
    assert cluster.core.client_count == 1 and cluster.core.worker_count == 2
    assert not any(to == alice.identity for to, _ in out)
    _check_alice_cleaned_up(cluster, workers, alice, bob, alice_ids, bob_ids, out)
    # A timed-out client that speaks again is told it is unknown.
    out = cluster.send(alice.identity, m.Heartbeat())
    assert isinstance(only(out, alice.identity), m.Refused)


def test_client_disconnect_cleans_up_like_clear():
    cluster, workers, alice, bob, alice_ids, bob_ids = _two_clients_with_work()
    out = cluster.send(alice.identity, m.Disconnect())
    assert cluster.core.client_count == 1
    _check_alice_cleaned_up(cluster, workers, alice, bob, alice_ids, bob_ids, out)


def test_an_object_shared_by_two_clients_is_deleted_when_the_last_owner_leaves():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    alice, bob = cluster.add_client(), cluster.add_client()
    cluster.submit(alice, 1)
    cluster.submit(bob, 1)
    cluster.complete(worker)
    out = cluster.send(alice.identity, m.Disconnect())
    assert not any(isinstance(msg, m.DeleteObjects) for _, msg in out)
    assert cluster.core.object_count == 1
    out = cluster.send(bob.identity, m.Disconnect())
    assert only(out, worker.identity, m.DeleteObjects).object_ids == [FUNCTION_ID]
    assert cluster.core.object_count == 0 and cluster.core.client_count == 0


def test_tasks_using_another_clients_object_survive_that_client_leaving():
    """Bob names a function Alice uploaded (same content id) without sending it himself.

    PROTOCOL.md only asks that the function be an object the scheduler holds, so Bob's tasks are
    accepted. Either they must be rejected up front, or the object must stay alive while his tasks use
    it; what must not happen is the core failing on an object it no longer has.
    """
    cluster = SimulatedCluster(CoreConfig(client_timeout_seconds=5, worker_timeout_seconds=100))
    worker = cluster.add_worker(capacity=1)
    alice, bob = cluster.add_client(), cluster.add_client()
    cluster.submit(alice, 1)
    bob_ids = cluster.submit(bob, 3, send_object=False)
    assert bob.failures() == []  # accepted: the scheduler holds the function
    # Alice goes silent; her timeout frees the worker's slot and releases the function.
    cluster.now += 6
    cluster.send(bob.identity, m.Heartbeat())
    cluster.send(worker.identity, m.Heartbeat())
    cluster.tick()  # must not raise: the I/O shell does not catch exceptions from on_tick
    cluster.run_to_completion()
    for task_id in bob_ids:
        assert len(bob.outcomes[task_id]) == 1, bob.outcomes
    assert_no_task_state(cluster.core)


def test_a_function_still_in_use_is_not_deleted_from_workers():
    """DeleteObjects must not name an object that tasks still queued or running on that worker need."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    alice, bob = cluster.add_client(), cluster.add_client()
    cluster.submit(alice, 1)
    bob_ids = cluster.submit(bob, 2, send_object=False)
    out = cluster.send(alice.identity, m.Disconnect())
    deleted = [oid for to, msg in out if isinstance(msg, m.DeleteObjects) for oid in msg.object_ids]
    if bob.failures(m.FailureKind.REJECTED):
        return  # rejecting Bob up front is a valid answer too
    assert FUNCTION_ID not in deleted, "the worker was told to drop a function that Bob's tasks on it still use"
    cluster.complete(worker)
    assert_exactly_once(bob, bob_ids)


# ---------------------------------------------------------------------------------------------- 9. shutdown


def test_shutdown_is_refused_in_protected_mode():
    cluster = SimulatedCluster()
    worker = cluster.add_worker()
    client, other = cluster.add_client(), cluster.add_client()
    out = cluster.send(client.identity, m.ShutdownRequest())
    response = only(out)
    assert isinstance(response, m.ShutdownResponse) and response.accepted is False and response.reason
    assert not cluster.core.should_exit
    assert worker.received(m.Disconnect) == [] and other.received(m.Disconnect) == []
    assert cluster.core.worker_count == 1 and cluster.core.client_count == 2


def test_shutdown_disconnects_everyone_when_unprotected():
    cluster = SimulatedCluster(CoreConfig(protected=False))
    workers = [cluster.add_worker() for _ in range(3)]
    requester, other = cluster.add_client(), cluster.add_client()
    out = cluster.send(requester.identity, m.ShutdownRequest())
    assert cluster.core.should_exit
    assert only(out, requester.identity, m.ShutdownResponse).accepted is True
    assert requester.received(m.Disconnect) == []
    for peer in workers + [other]:
        assert len(peer.received(m.Disconnect)) == 1
    assert len(out) == 5


# ---------------------------------------------------------------------------------------------- 10. role errors


def test_a_worker_submitting_tasks_gets_a_protocol_error_and_changes_nothing():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    cluster.submit(client, 2)
    before = snapshot(cluster.core)
    objects_before = dict(cluster.core.objects.stored)
    submission = m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=OTHER_ID, payload=OTHER_PAYLOAD)],
        groups=[_group([(client.prefix << TASK_COUNTER_BITS) | 500], function_id=OTHER_ID)],
    )
    out = cluster.send(worker.identity, submission)
    assert isinstance(only(out, worker.identity), m.ProtocolError)
    assert len(out) == 1
    assert snapshot(cluster.core) == before and cluster.core.objects.stored == objects_before


def test_a_client_sending_results_gets_a_protocol_error_and_changes_nothing():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 2)
    before = snapshot(cluster.core)
    out = cluster.send(
        client.identity,
        m.TaskResults(
            succeeded_ids=ids[:1], payloads=[b"forged"],
            failures=[m.TaskFailure(task_id=ids[1], kind=m.FailureKind.WORKER_DIED)],
        ),
    )
    assert isinstance(only(out, client.identity), m.ProtocolError)
    assert len(out) == 1
    assert snapshot(cluster.core) == before
    assert client.outcomes == {}
    cluster.complete(worker)
    assert_exactly_once(client, ids)


@pytest.mark.parametrize("message", [m.Welcome(), m.Refused(reason="x"), m.ClearResponse(), m.HeartbeatEcho()])
def test_messages_only_the_scheduler_sends_are_protocol_errors(message):
    cluster = SimulatedCluster()
    cluster.add_worker()
    client = cluster.add_client()
    before = snapshot(cluster.core)
    out = cluster.send(client.identity, message)
    assert isinstance(only(out, client.identity), m.ProtocolError)
    assert snapshot(cluster.core) == before


def test_workers_cannot_cancel_clear_or_shut_down():
    cluster = SimulatedCluster(CoreConfig(protected=False))
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 3)
    before = snapshot(cluster.core)
    for message in (m.CancelTasks(task_ids=ids), m.ClearRequest(), m.ShutdownRequest()):
        out = cluster.send(worker.identity, message)
        assert isinstance(only(out, worker.identity), m.ProtocolError) and len(out) == 1, out
    assert not cluster.core.should_exit
    assert snapshot(cluster.core) == before
    cluster.complete(worker)
    assert_exactly_once(client, ids)


def test_a_bad_frame_is_answered_with_a_protocol_error():
    core = SchedulerCore(CoreConfig())
    out = core.on_bad_frame(b"peer", "garbage")
    assert out == [(b"peer", m.ProtocolError(reason="garbage"))]


def test_a_registered_peer_that_sends_a_malformed_frame_is_dropped_and_nothing_is_lost():
    cluster = SimulatedCluster()
    good, bad = cluster.add_worker(capacity=10), cluster.add_worker(capacity=10)
    client = cluster.add_client()
    ids = cluster.submit(client, 20)
    assert good.pending and bad.pending
    out = cluster.core.on_bad_frame(bad.identity, "malformed message: garbage")
    assert (bad.identity, m.ProtocolError(reason="malformed message: garbage")) in out
    assert any(peer == bad.identity and isinstance(msg, m.Disconnect) for peer, msg in out)
    assert cluster.core.worker_count == 1
    cluster.forget_worker(bad)
    cluster._route(out)
    cluster.run_to_completion()
    assert_exactly_once(client, ids)


def test_a_client_that_sends_a_malformed_frame_is_dropped_and_others_carry_on():
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=100)
    good, bad = cluster.add_client(), cluster.add_client()
    good_ids = cluster.submit(good, 10)
    cluster.submit(bad, 10)
    out = cluster.core.on_bad_frame(bad.identity, "malformed message: garbage")
    assert any(peer == bad.identity and isinstance(msg, m.Disconnect) for peer, msg in out)
    assert cluster.core.client_count == 1
    cluster._route(out)
    cluster.run_to_completion()
    assert_exactly_once(good, good_ids)


def test_a_message_the_scheduler_failed_to_handle_does_not_drop_its_sender():
    cluster = SimulatedCluster()
    client = cluster.add_client()
    out = cluster.core.on_bad_frame(client.identity, "scheduler could not handle X", drop_sender=False)
    assert out == [(client.identity, m.ProtocolError(reason="scheduler could not handle X"))]
    assert cluster.core.client_count == 1


# ---------------------------------------------------------------------------------------------- scale


@pytest.mark.timeout(60)
def test_a_thousand_workers_run_a_hundred_thousand_tasks():
    cluster = SimulatedCluster(check_invariants=False)  # after each of 10,000 messages, it would take minutes
    workers = [cluster.add_worker(capacity=10) for _ in range(1000)]
    clients = [cluster.add_client() for _ in range(4)]
    submitted = collections.defaultdict(list)
    for _ in range(5):
        for client in clients:
            submitted[client.identity] += cluster.submit(client, 5000)
    assert sum(len(w.pending) for w in workers) == 10_000
    cluster.run_to_completion(batch=10)

    total = 0
    for client in clients:
        ids = submitted[client.identity]
        total += len(ids)
        assert len(client.outcomes) == len(ids)
        assert all(len(outcome) == 1 for outcome in client.outcomes.values())
        assert set(client.outcomes) == set(ids)
    assert total == 100_000
    assert sum(len(w.received_task_ids) for w in workers) == 100_000
    assert all(w.max_pending_seen <= 10 for w in workers)
    assert_no_task_state(cluster.core)
    cluster.core.check_invariants()


# ---------------------------------------------------------------------------------------------- client deletes objects


def test_a_client_deletes_a_shared_argument_object_once_no_live_task_names_it():
    """Hidden objects of shared arguments: DeleteObjects from the owning client frees them in the scheduler and
    the workers, but never while a task of that client still names the object (dispatch must find it)."""
    from scaler.utility.identifiers import random_object_id

    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    alice, bob = cluster.add_client(), cluster.add_client()
    cluster.submit(alice, 1)  # sends the function
    shared_id = random_object_id()
    task_ids = alice.next_task_ids(2)
    cluster.send(alice.identity, m.TaskSubmission(
        objects=[m.ObjectPayload(object_id=shared_id, payload=b"big", name="shared argument")],
        groups=[m.TaskGroup(function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
                            args=[shared_id, shared_id], object_arg_indices=[0, 1])],
    ))
    assert cluster.core.object_count == 2
    # Bob cannot delete Alice's object, and Alice cannot delete it while her tasks still name it.
    assert cluster.send(bob.identity, m.DeleteObjects(object_ids=[shared_id])) == []
    assert cluster.send(alice.identity, m.DeleteObjects(object_ids=[shared_id])) == []
    assert cluster.core.object_count == 2
    cluster.run_to_completion(batch=1)
    assert_exactly_once(alice, task_ids)
    out = cluster.send(alice.identity, m.DeleteObjects(object_ids=[shared_id, shared_id]))
    assert only(out, worker.identity, m.DeleteObjects).object_ids == [shared_id]
    assert cluster.core.object_count == 1  # the function stays
    assert shared_id not in cluster.core.peers.clients[alice.identity].object_ids
    assert cluster.send(alice.identity, m.DeleteObjects(object_ids=[shared_id])) == []  # twice is harmless
    out = cluster.send(worker.identity, m.DeleteObjects(object_ids=[FUNCTION_ID]))
    assert isinstance(only(out, worker.identity), m.ProtocolError)
    assert cluster.core.object_count == 1


def test_a_client_cannot_delete_the_function_of_its_own_unfinished_task():
    """PROTOCOL.md §9: an object an unfinished task of the client names stays. The function was freed all the
    same, and dispatching the task to a worker that joined later raised KeyError."""
    cluster = SimulatedCluster()
    client = cluster.add_client()
    (task_id,) = cluster.submit(client, 1)  # no worker yet: it waits in the queue
    assert cluster.send(client.identity, m.DeleteObjects(object_ids=[FUNCTION_ID])) == []
    assert cluster.core.object_count == 1
    worker = cluster.add_worker()
    assert list(worker.pending) == [task_id]
    cluster.run_to_completion()
    assert_exactly_once(client, [task_id])
    assert cluster.send(client.identity, m.DeleteObjects(object_ids=[FUNCTION_ID])) == [
        (worker.identity, m.DeleteObjects(object_ids=[FUNCTION_ID]))
    ]


def test_welcome_announces_the_size_limits_peers_must_respect():
    cluster = SimulatedCluster(CoreConfig(max_frame_bytes=1 << 20, max_control_frame_bytes=1 << 19))
    for peer in (cluster.add_client(), cluster.add_worker()):
        (welcome,) = peer.received(m.Welcome)
        assert (welcome.max_frame_bytes, welcome.max_control_frame_bytes) == (1 << 20, 1 << 19)


# ---------------------------------------------------------------------------------------------- task warnings


def warning_for(task_id: int, text: str = "careful") -> m.TaskWarning:
    return m.TaskWarning(
        task_id=task_id, category="builtins.UserWarning", category_bases=("builtins.Warning",), message=text,
        filename="/src/tasks.py", lineno=7, module="tasks",
    )


def test_warnings_reach_the_tasks_client_in_the_message_with_the_outcome():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    alice, bob = cluster.add_client(), cluster.add_client()
    (ok_id,) = cluster.submit(alice, 1)
    (failed_id,) = cluster.submit(bob, 1)
    out = cluster.send(worker.identity, m.TaskResults(
        succeeded_ids=[ok_id], payloads=[payload_for(ok_id)],
        failures=[m.TaskFailure(task_id=failed_id, kind=m.FailureKind.RAISED, type_name="E", message="m")],
        warnings=[warning_for(ok_id, "one"), warning_for(failed_id, "two"), warning_for(ok_id, "three")],
    ))
    to_alice = only(out, alice.identity, m.TaskResults)
    assert to_alice.succeeded_ids == [ok_id]
    assert [w.message for w in to_alice.warnings] == ["one", "three"]
    assert to_alice.warnings[0] == warning_for(ok_id, "one"), "every field goes through unchanged"
    to_bob = only(out, bob.identity, m.TaskResults)
    assert [f.task_id for f in to_bob.failures] == [failed_id]
    assert [w.message for w in to_bob.warnings] == ["two"]
    assert_no_task_state(cluster.core)


def test_warnings_of_a_task_the_worker_does_not_hold_are_dropped():
    cluster = SimulatedCluster()
    worker, other = cluster.add_worker(capacity=1), cluster.add_worker(capacity=1)
    client = cluster.add_client()
    cluster.submit(client, 2)
    (theirs,) = list(other.pending)
    out = cluster.send(worker.identity, m.TaskResults(
        succeeded_ids=[], payloads=[], failures=[], warnings=[warning_for(theirs), warning_for(987654321)]
    ))
    assert out == []
    cluster.run_to_completion()
    assert all(not message.warnings for message in client.received(m.TaskResults))


def test_warnings_of_a_quiet_graph_task_go_to_its_client_though_its_result_does_not():
    """The caller of get() wants to hear about a warning deep inside the graph: the scheduler forwards it
    at once, with the client's results of that event, and the client holds it for the graph's futures."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=10)
    client = cluster.add_client()
    (plain_id,) = cluster.submit(client, 1)  # sends the function
    quiet_id, final_id = client.next_task_ids(2)
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[quiet_id, final_id], args=[b"x", b""],
        ref_arg_indices=[1], ref_task_ids=[quiet_id],
    )], quiet_task_ids=[quiet_id]))
    cluster.complete(worker, task_ids=[plain_id])
    assert list(worker.pending) == [quiet_id]
    del worker.pending[quiet_id]
    out = cluster.send(worker.identity, m.TaskResults(
        succeeded_ids=[quiet_id], payloads=[b"intermediate"], failures=[], warnings=[warning_for(quiet_id)]
    ))
    forwarded = only(out, client.identity, m.TaskResults)
    assert forwarded.succeeded_ids == [] and forwarded.warnings == [warning_for(quiet_id)]
    assert list(worker.pending) == [final_id]
    cluster.complete(worker)
    assert client.outcomes[final_id] == [("ok", payload_for(final_id))]
    assert quiet_id not in client.outcomes
    assert_no_task_state(cluster.core)


# ---------------------------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("break_it", [
    pytest.param(lambda core, task_id: core.tasks.records[task_id].client.task_ids.discard(task_id), id="client"),
    pytest.param(lambda core, task_id: setattr(core.tasks, "waiting", core.tasks.waiting + 1), id="queue-count"),
    pytest.param(
        lambda core, task_id: next(iter(next(iter(core.tasks.queues[()].lanes.values())).levels.values())).append(
            core.tasks.records[task_id]
        ), id="queued-twice",
    ),
    pytest.param(
        lambda core, task_id: setattr(core.tasks.records[task_id].client, "tasks_queued", 0), id="client-queued"
    ),
    pytest.param(
        lambda core, task_id: setattr(core.tasks.records[task_id].client, "tasks_running", 0), id="client-running"
    ),
    pytest.param(lambda core, task_id: core.tasks.queues[()].turns.clear(), id="lane-without-turn"),
    pytest.param(lambda core, task_id: core.objects.stored.clear(), id="objects"),
    pytest.param(lambda core, task_id: setattr(core.tasks.records[task_id], "blame_pending", True), id="blame"),
])
def test_check_invariants_notices_a_core_whose_parts_disagree(break_it):
    """The harness relies on it after every message: it must fail on a broken core, not only pass on a good one."""
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=1)
    client = cluster.add_client()
    _, queued = cluster.submit(client, 2)
    cluster.core.check_invariants()
    break_it(cluster.core, queued)
    with pytest.raises(CoreInvariantError):
        cluster.core.check_invariants()
