"""A restarted scheduler rebuilds its state from what workers re-announce (rejoin.py, PROTOCOL.md §21)."""

from __future__ import annotations

import dataclasses

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.rejoin import awaited_identity
from scaler.utility.identifiers import TASK_COUNTER_BITS
from tests.unit.core_harness import SimClient, SimulatedCluster, SimWorker, payload_for

OLD_PREFIX = 7
GRACE = 30.0


def old_ids(*counters: int) -> list[int]:
    """Task ids a client of the scheduler before (prefix OLD_PREFIX) made."""
    return [(OLD_PREFIX << TASK_COUNTER_BITS) | counter for counter in counters]


def restarted() -> SimulatedCluster:
    return SimulatedCluster(CoreConfig(client_timeout_seconds=GRACE))


def resumed_client(sim: SimulatedCluster) -> SimClient:
    """A client of the scheduler before, back with its id prefix (how it says so is the client's hello: here the
    harness sets the prefix, as that hello would)."""
    client = sim.add_client(b"resumed")
    sim.core.peers.clients[client.identity].id_prefix = OLD_PREFIX
    client.prefix = OLD_PREFIX
    return client


def rejoining_worker(sim: SimulatedCluster, identity: bytes, capacity: int = 4) -> SimWorker:
    worker = sim.workers[identity] = SimWorker(identity=identity, capacity=capacity)
    sim.send(identity, m.Hello(role=m.Role.WORKER, name=identity.decode(), capacity=capacity, rejoining=True))
    assert isinstance(worker.inbox[0], m.Welcome)
    return worker


def test_an_unknown_peer_is_refused_as_unknown_and_a_bad_hello_is_not() -> None:
    sim = restarted()
    out = sim.send(b"stranger", m.Heartbeat())
    assert out == [(b"stranger", m.Refused(reason=out[0][1].reason, unknown_peer=True))]
    out = sim.send(b"old", m.Hello(role=m.Role.WORKER, name="old", capacity=1, protocol_version=0))
    assert isinstance(out[0][1], m.Refused) and not out[0][1].unknown_peer


def test_reannounced_tasks_are_held_by_their_worker_for_an_awaited_client() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0, 1)))
    peer = sim.core.peers.workers[worker.identity]
    assert list(peer.assigned) == old_ids(0, 1)
    awaited = sim.core.peers.awaited_clients[awaited_identity(OLD_PREFIX)]
    assert awaited.task_ids == set(old_ids(0, 1))
    # A new client never gets the prefix of a client of the scheduler before.
    assert sim.add_client(b"new").prefix != OLD_PREFIX
    # Nothing is sent anywhere for them: they run where they are.
    assert worker.submissions() == []


def test_a_result_of_a_reannounced_task_completes_its_resubmission_without_running_it_again() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0)))
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"done"], failures=[]))
    assert sim.core.task_count == 0 and old_ids(0)[0] in sim.core.rejoin.orphans
    client = resumed_client(sim)
    sim.submit(client, 1, task_ids=old_ids(0))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"done")]
    assert worker.submissions() == [] and sim.core.task_count == 0
    assert sim.core.rejoin.orphans == {}


def test_results_made_while_no_scheduler_knew_the_worker_are_orphans_until_resubmitted() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=[]))
    failure = m.TaskFailure(task_id=old_ids(1)[0], kind=m.FailureKind.RAISED, type_name="ValueError", message="x")
    sim.send(worker.identity, m.TaskResults(
        succeeded_ids=old_ids(0), payloads=[b"zero"], failures=[
            failure, m.TaskFailure(task_id=old_ids(2)[0], kind=m.FailureKind.RETURNED),
        ],
    ))
    client = resumed_client(sim)
    sim.submit(client, 3, task_ids=old_ids(0, 1, 2))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"zero")]
    assert client.outcomes[old_ids(1)[0]] == [("failed", failure)]
    sim.tick(sim.core.rejoin.hold_seconds)  # the hold for other workers to come back
    # Given back unfinished: it runs now, once.
    assert worker.pending == {old_ids(2)[0]: worker.pending[old_ids(2)[0]]}
    sim.complete(worker)
    assert client.outcomes[old_ids(2)[0]] == [("ok", payload_for(old_ids(2)[0]))]


def test_a_resubmitted_task_still_running_is_not_run_twice() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    other = sim.add_worker(capacity=4)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0)))
    client = resumed_client(sim)
    sim.submit(client, 2, task_ids=old_ids(0, 1))
    sim.tick(sim.core.rejoin.hold_seconds)  # the hold for other workers to come back
    sent = [task_id for w in (worker, other) for task_id in w.received_task_ids]
    assert sent == old_ids(1), "the running task was sent again"
    record = sim.core.tasks.records[old_ids(0)[0]]
    assert record.client.identity == client.identity and record.worker is sim.core.peers.workers[worker.identity]
    # Adopted: its result goes to its client as any other.
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"r"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"r")]
    assert sim.core.peers.awaited_clients[awaited_identity(OLD_PREFIX)].task_ids == set()


def test_a_task_resubmitted_before_its_worker_came_back_is_taken_from_the_queue() -> None:
    sim = restarted()
    client = resumed_client(sim)  # no worker yet: the task waits in the queue
    sim.submit(client, 2, task_ids=old_ids(0, 1))
    worker = rejoining_worker(sim, b"returning")
    assert worker.received_task_ids == [], "a rejoining worker got work before it said what it holds"
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0)))
    # The one it runs stays there; the other is dispatched to it now, as to any worker.
    assert worker.received_task_ids == old_ids(1)
    assert sim.core.tasks.records[old_ids(0)[0]].worker is sim.core.peers.workers[worker.identity]
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"r"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"r")]


def test_a_reannounced_task_given_back_is_forgotten_and_its_resubmission_runs_it() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0)))
    sim.send(worker.identity, m.TaskResults(
        succeeded_ids=[], payloads=[], failures=[m.TaskFailure(task_id=old_ids(0)[0], kind=m.FailureKind.RETURNED)]
    ))
    assert sim.core.task_count == 0 and sim.core.rejoin.orphans == {}
    client = resumed_client(sim)
    sim.submit(client, 1, task_ids=old_ids(0))
    sim.tick(sim.core.rejoin.hold_seconds)  # the hold for other workers to come back
    assert worker.received_task_ids == old_ids(0)


def test_a_worker_lost_with_reannounced_tasks_leaves_nothing_to_requeue() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0, 1)))
    sim.add_worker(capacity=4, identity=b"other")
    sim.send(worker.identity, m.Disconnect(reason="bye"))
    assert sim.core.task_count == 0
    assert sim.workers[b"other"].received_task_ids == []


def test_an_awaited_client_that_does_not_come_back_loses_its_tasks_and_orphans_expire() -> None:
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0, 1)))
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(5), payloads=[b"x"], failures=[]))
    sim.tick(GRACE / 2)
    worker.inbox.clear()
    assert sim.core.task_count == 2 and sim.core.rejoin.orphans
    sim.heartbeat_all()
    sim.tick(GRACE / 2 + 1)
    assert sim.core.task_count == 0 and sim.core.rejoin.orphans == {}
    assert sim.core.peers.awaited_clients == {}
    assert worker.received(m.CancelTasks) == [m.CancelTasks(task_ids=old_ids(0, 1), force=False)]
    # Long after, a late result of one of them is no orphan any more: nothing is kept past the grace period.
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"late"], failures=[]))
    assert sim.core.rejoin.orphans == {}


def test_reannounced_tasks_of_a_client_already_back_are_its_own() -> None:
    sim = restarted()
    client = resumed_client(sim)
    worker = sim.add_worker(capacity=4, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(0)))
    assert sim.core.peers.awaited_clients == {}
    # Its result reaches the client at once, and a re-submission racing with it still finds it.
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"r"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"r")]
    sim.submit(client, 1, task_ids=old_ids(0))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"r"), ("ok", b"r")]
    assert worker.received_task_ids == []


def test_without_a_reannouncement_results_of_unknown_tasks_are_dropped_as_before() -> None:
    sim = SimulatedCluster(dataclasses.replace(CoreConfig(), client_timeout_seconds=GRACE))
    worker = sim.add_worker(capacity=4)
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"x"], failures=[]))
    assert sim.core.rejoin.orphans == {}


def test_objects_a_store_holds_that_nobody_names_again_are_deleted_after_the_grace_period() -> None:
    sim = restarted()
    store = sim.add_store("tcp://store-a:1")
    named, unnamed = b"n" * 16, b"u" * 16
    sim.send(store.identity, m.ObjectsHeld(object_ids=[named, unnamed], sizes=[10, 10]))
    client = sim.add_client()
    sim.send(client.identity, m.TaskSubmission(objects=[
        m.ObjectPayload(object_id=named, payload=b"", name="obj", size=10, holder="tcp://store-a:1"),
    ], groups=[]))
    sim.tick(GRACE / 2)
    sim.heartbeat_all()
    assert store.received(m.DeleteObjects) == []
    sim.tick(GRACE / 2 + 1)
    assert store.received(m.DeleteObjects) == [m.DeleteObjects(object_ids=[unnamed])]
    assert sim.core.rejoin.unclaimed == {}


def test_a_new_client_of_this_scheduler_never_gets_a_result_of_a_scheduler_before() -> None:
    """A restarted scheduler gives prefixes from its start time, but a client with a prefix it issued itself
    never matches an orphan result, even if a scheduler before gave the same prefix."""
    sim = restarted()
    worker = sim.add_worker(capacity=4, rejoining=True)
    client = sim.add_client(b"new")  # prefix 1 here, as the old scheduler's first client had
    sim.send(worker.identity, m.Reannounce(task_ids=[]))
    old_task = (client.prefix << TASK_COUNTER_BITS) | 0
    sim.send(worker.identity, m.TaskResults(succeeded_ids=[old_task], payloads=[b"old"], failures=[]))
    sim.submit(client, 1, task_ids=[old_task])
    assert worker.received_task_ids == [old_task] and client.outcomes[old_task] == []
    sim.complete(worker)
    assert client.outcomes[old_task] == [("ok", payload_for(old_task))]


def test_new_clients_never_get_the_prefix_of_a_client_whose_tasks_workers_re_announced() -> None:
    sim = SimulatedCluster(CoreConfig(first_id_prefix=OLD_PREFIX))
    worker = rejoining_worker(sim, b"returning")
    sim.send(worker.identity, m.Reannounce(task_ids=[(OLD_PREFIX << TASK_COUNTER_BITS) | 3]))
    assert OLD_PREFIX not in [sim.add_client().prefix for _ in range(3)]


def test_a_reannounce_is_taken_once_after_a_rejoining_hello_and_never_beyond_the_workers_capacity() -> None:
    sim = restarted()
    fresh = sim.add_worker(capacity=2)
    sim.send(fresh.identity, m.Reannounce(task_ids=old_ids(0)))
    assert list(sim.core.peers.workers[fresh.identity].assigned) == [], "a worker that did not rejoin re-announced"
    worker = sim.add_worker(capacity=2, rejoining=True)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(1, 2, 3)))
    assert list(sim.core.peers.workers[worker.identity].assigned) == old_ids(1, 2)
    sim.send(worker.identity, m.Reannounce(task_ids=old_ids(4)))
    assert list(sim.core.peers.workers[worker.identity].assigned) == old_ids(1, 2), "a second reannounce was taken"


# ------------------------------------------------------------------------------------------ who comes back first


def client_saying_hello_again(sim: SimulatedCluster) -> SimClient:
    """A client of the scheduler before, resuming through its hello (the first sign of a restart, for the core)."""
    client = sim.clients[b"resuming"] = SimClient(identity=b"resuming", prefix=OLD_PREFIX)
    sim.send(client.identity, m.Hello(role=m.Role.CLIENT, name="resuming", id_prefix=OLD_PREFIX))
    assert isinstance(client.inbox[-1], m.Welcome) and client.inbox[-1].id_prefix == OLD_PREFIX
    return client


def test_resubmitted_tasks_wait_for_the_workers_to_come_back_and_a_late_result_completes_one() -> None:
    sim = restarted()
    early = rejoining_worker(sim, b"early")
    sim.send(early.identity, m.Reannounce(task_ids=[]))
    client = client_saying_hello_again(sim)
    sim.submit(client, 3, task_ids=old_ids(0, 1, 2))
    assert early.received_task_ids == [], "a re-submitted task went out before the others could come back"
    # The worker that made task 0's result while the scheduler was down, and runs task 1, comes back later.
    late = rejoining_worker(sim, b"late")
    sim.send(late.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"zero"], failures=[]))
    sim.send(late.identity, m.Reannounce(task_ids=old_ids(1)))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"zero")]
    assert sim.core.tasks.records[old_ids(1)[0]].worker is sim.core.peers.workers[late.identity]
    sim.tick(sim.core.rejoin.hold_seconds)
    # Only the task nobody held goes out, once the hold is over.
    assert sorted(early.received_task_ids + late.received_task_ids) == old_ids(2)
    sim.send(late.identity, m.TaskResults(succeeded_ids=old_ids(1), payloads=[b"one"], failures=[]))
    assert client.outcomes[old_ids(1)[0]] == [("ok", b"one")]


def test_new_clients_tasks_are_not_held_back_after_a_restart() -> None:
    sim = restarted()
    worker = rejoining_worker(sim, b"early")
    sim.send(worker.identity, m.Reannounce(task_ids=[]))
    new = sim.add_client(b"new")
    (task_id,) = sim.submit(new, 1)
    assert worker.received_task_ids == [task_id]


def test_a_result_from_a_worker_back_after_the_hold_completes_the_task_another_worker_got_since() -> None:
    sim = restarted()
    early = rejoining_worker(sim, b"early", capacity=1)
    sim.send(early.identity, m.Reannounce(task_ids=[]))
    client = client_saying_hello_again(sim)
    sim.submit(client, 2, task_ids=old_ids(0, 1))
    sim.tick(sim.core.rejoin.hold_seconds)
    assert early.received_task_ids == old_ids(0)
    late = rejoining_worker(sim, b"late")
    out = sim.send(late.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"first"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"first")]
    assert (early.identity, m.CancelTasks(task_ids=old_ids(0), force=False)) in out, "the other one is told"
    assert early.received_task_ids == old_ids(0, 1), "the slot freed on the other worker gets the next task"
    # The other worker's result, if it ran anyway, finds the task done: its future completes once.
    sim.send(early.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"second"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"first")]


def test_a_late_result_takes_a_resubmitted_task_out_of_the_queue() -> None:
    sim = restarted()
    client = client_saying_hello_again(sim)
    sim.tick(sim.core.rejoin.hold_seconds)
    sim.submit(client, 2, task_ids=old_ids(0, 1))  # no worker: both wait in the queue
    worker = rejoining_worker(sim, b"late")
    sim.send(worker.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"zero"], failures=[]))
    sim.send(worker.identity, m.Reannounce(task_ids=[]))
    assert client.outcomes[old_ids(0)[0]] == [("ok", b"zero")]
    assert worker.received_task_ids == old_ids(1), "the task with a result was sent out again"


def test_only_a_rejoining_workers_results_for_a_resumed_clients_tasks_complete_tasks_it_was_not_given() -> None:
    sim = restarted()
    holder = rejoining_worker(sim, b"holder")
    sim.send(holder.identity, m.Reannounce(task_ids=[]))
    new = sim.add_client(b"new")
    (new_task,) = sim.submit(new, 1)
    client = client_saying_hello_again(sim)
    sim.tick(sim.core.rejoin.hold_seconds)
    sim.submit(client, 1, task_ids=old_ids(0))
    assert holder.received_task_ids == [new_task, *old_ids(0)]
    stranger = rejoining_worker(sim, b"stranger")
    # Before its re-announcement: a result it made for the scheduler before; but a new client's task is not one.
    sim.send(stranger.identity, m.TaskResults(succeeded_ids=[new_task], payloads=[b"forged"], failures=[]))
    assert new.outcomes[new_task] == []
    sim.send(stranger.identity, m.Reannounce(task_ids=[]))
    # After it: only what it was given counts, as always.
    sim.send(stranger.identity, m.TaskResults(succeeded_ids=old_ids(0), payloads=[b"late"], failures=[]))
    assert client.outcomes[old_ids(0)[0]] == []
    sim.send(holder.identity, m.TaskResults(succeeded_ids=[new_task, *old_ids(0)], payloads=[b"a", b"b"], failures=[]))
    assert new.outcomes[new_task] == [("ok", b"a")] and client.outcomes[old_ids(0)[0]] == [("ok", b"b")]


def test_the_hold_lasts_while_the_workers_of_a_large_cluster_come_back_at_their_spaced_heartbeats() -> None:
    # 400 workers heartbeat every 15 s (a quarter of the worker timeout, PeerRegistry.worker_heartbeat_seconds),
    # so after a restart an idle one learns of it up to 15 s later: they rejoin spread over 15 s, and the one
    # running a re-submitted task comes back last. Held for the configured interval (2 s) only, that task would
    # have gone to another worker long before.
    sim = restarted()
    config = CoreConfig()  # the defaults, as `restarted` has them
    workers = 400
    spaced = config.worker_timeout_seconds / 4
    assert workers / 25 >= spaced > config.heartbeat_interval_seconds, "not a cluster whose heartbeats are spaced"
    client = client_saying_hello_again(sim)
    sim.submit(client, 2, task_ids=old_ids(0, 1))
    others = []
    for index in range(workers - 1):
        sim.tick(spaced / workers)
        others.append(rejoining_worker(sim, b"w%d" % index))
        sim.send(others[-1].identity, m.Reannounce(task_ids=[]))
        if index % 50 == 0:
            sim.send(client.identity, m.Heartbeat())
    sim.tick(spaced / workers)
    last = rejoining_worker(sim, b"last")
    sim.send(last.identity, m.Reannounce(task_ids=old_ids(0)))
    assert [task_id for worker in others for task_id in worker.received_task_ids] == [], "ran twice"
    sim.tick(sim.core.rejoin.hold_seconds)
    assert sorted(task_id for worker in [*others, last] for task_id in worker.received_task_ids) == old_ids(1)
