"""Fuzzing the scheduler core: well-behaved clients and workers share it with peers that break every rule.

A hypothesis state machine drives the sans-I/O core (through the simulated cluster of core_harness.py).
Good clients submit plain and graph tasks, cancel some, drain workers and heartbeat; good workers answer,
fail, give back, refuse cancels, leave or silently die; time moves on. Bad senders send random messages of every
type, with ids aimed at other peers' tasks and objects: before hello, in the wrong role, twice, with
mismatched counts, forged graphs. After every step:

- the core has not raised, and its structures agree with each other (SchedulerCore.check_invariants,
  which the simulated cluster calls after every message and tick);
- a bad message got the reply PROTOCOL.md §3 promises (refused, protocolError, or nothing), left the
  core as it was where the table says "ignored", and touched no task it was not holding;
- no good task has more than one outcome, and good peers were never refused;
- a worker got no task after it was drained.

At the end, once the silent peers have timed out and the good workers have answered everything, every
accepted task of a good client has exactly one outcome and the core holds no task state at all.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import pytest
from core_harness import (
    FUNCTION_ID,
    FUNCTION_PAYLOAD,
    SimClient,
    SimulatedCluster,
    SimWorker,
    assert_no_task_state,
    last_directory,
)
from fuzz_budget import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from message_strategies import (
    SMALL_BYTES,
    U64,
    forged_task_ids,
    hellos,
    message_strategies,
    task_groups,
    task_results,
)

from scaler.protocol import messages as m
from scaler.protocol.sharing import share_problem
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.utility.identifiers import OBJECT_ID_BYTES, kept_result_id, random_object_id

# Pure CPU and deterministic (derandomized): about 22 s on a quiet machine, and past 120 s at a load of 20 on
# two cores. The limit is there for a hang, which this would still catch.
pytestmark = pytest.mark.timeout(600)

PEER_TIMEOUT = 30.0
CONFIG = CoreConfig(
    protected=True,
    client_timeout_seconds=PEER_TIMEOUT,
    worker_timeout_seconds=PEER_TIMEOUT,
    max_task_crashes=3,
    load_balance_seconds=1.0,
    load_balance_trigger_times=1,
    # Prefetch on (the default): its depths and take-backs are fuzzed too.
    worker_queue_seconds=0.05,
)
BAD_IDENTITIES = [b"bad-0", b"bad-1", b"bad-2"]
# What each registered role may send (PROTOCOL.md §3); anything else gets protocolError and changes nothing.
CLIENT_SENDS = {
    m.Heartbeat, m.Disconnect, m.TaskSubmission, m.CancelTasks, m.ClearRequest, m.DeleteObjects, m.ShutdownRequest,
    m.DrainWorkers,
    m.ObjectsLost, m.Relay,
}
WORKER_SENDS = {
    m.Heartbeat, m.Disconnect, m.TaskResults, m.CancelRefused, m.TaskStarted, m.ObjectsLost, m.TaskOutput, m.Reannounce,
}
# Tags good workers offer and good tasks require: some tasks need a worker that may not be there yet.
TAG_POOL = ["python", "native", "gpu"]
TAG_SETS = st.lists(st.sampled_from(TAG_POOL), max_size=2, unique=True)
STORE_SENDS = {m.Heartbeat, m.Disconnect, m.Relay, m.ObjectsLost, m.ObjectsHeld}
ANSWERING_KINDS = [m.FailureKind.RAISED, m.FailureKind.RETURNED, m.FailureKind.WORKER_DIED, m.FailureKind.SERIALIZATION]


def core_snapshot(core: SchedulerCore) -> tuple:
    """The core's state as plain values, to check that an ignored message changed nothing."""
    return (
        sorted(core.peers.clients),
        sorted(core.peers.workers),
        sorted(core.stores.by_address),
        {task_id: (r.worker.identity if r.worker else None, r.waiting_on, r.cancel_requested, r.crashes, r.canceled,
                   r.suspect, r.blame_pending, r.started)
         for task_id, r in core.tasks.records.items()},
        [r.task_id for r in core.tasks.queued_records()],
        {object_id: sorted(stored.owners) for object_id, stored in core.objects.stored.items()},
        {identity: (list(w.assigned), sorted(w.known_object_ids), w.draining)
         for identity, w in core.peers.workers.items()},
        {identity: (sorted(c.task_ids), sorted(c.object_ids)) for identity, c in core.peers.clients.items()},
    )


# ---------------------------------------------------------------------------------------------- the machine


class SchedulerCoreFuzz(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = SimulatedCluster(CONFIG, prefetch=True)
        self.good_clients: list[SimClient] = []
        # Accepted tasks of each good client: each must end with exactly one outcome.
        self.expected: dict[bytes, set[int]] = {}
        self.workers_made = 0
        self.stores_made = 0
        self.clients_made = 0
        # How far each good worker has read its inbox (for ReleaseTasks).
        self.read_upto: dict[bytes, int] = collections.defaultdict(int)
        # Drained worker registrations (good or bad): the core's peer, and how long its inbox was then.
        self.drained_at: dict[bytes, tuple[WorkerPeer, int]] = {}
        # Kept tasks of each good client it has not released (submit_kept).
        self.kept: dict[bytes, set[int]] = collections.defaultdict(set)

    @property
    def core(self) -> SchedulerCore:
        return self.cluster.core

    @property
    def good_workers(self) -> list[SimWorker]:
        return list(self.cluster.workers.values())

    def open_tasks(self, client: SimClient) -> list[int]:
        """Tasks with no outcome yet, and tasks run again because their stored result was lost (lineage)."""
        records = self.core.tasks.records
        return sorted(
            task_id for task_id in self.expected[client.identity]
            if not client.outcomes.get(task_id) or task_id in records
        )

    # ------------------------------------------------------------------------------------------ good peers

    @initialize()
    def start(self) -> None:
        self.add_client()
        self.add_worker(capacity=2)

    @precondition(lambda self: len(self.good_clients) < 3)
    @rule(share=st.sampled_from([1.0, 1.0, 0.5, 3.0]))
    def add_client(self, share: float = 1.0) -> None:
        client = self.cluster.add_client(b"good-client-%d" % self.clients_made)
        # As the hello's share sets it (ready_queue.py shares free slots by it; test_fuzz_core_fairness.py).
        self.core.peers.clients[client.identity].share = share
        self.clients_made += 1
        self.good_clients.append(client)
        self.expected[client.identity] = set()

    @precondition(lambda self: len(self.cluster.workers) < 4)
    @rule(capacity=st.integers(1, 4), tags=TAG_SETS)
    def add_worker(self, capacity: int, tags: Sequence[str] = ()) -> None:
        self.cluster.add_worker(capacity=capacity, identity=b"good-worker-%d" % self.workers_made, tags=tags)
        self.workers_made += 1

    @precondition(lambda self: self.cluster.stores and any(worker.pending for worker in self.good_workers))
    @rule(data=st.data())
    def worker_answers_stored(self, data: st.DataObject) -> None:
        """Large results: written into a registered store, named by id to the scheduler."""
        worker = data.draw(st.sampled_from([w for w in self.good_workers if w.pending]))
        holder = data.draw(st.sampled_from(sorted(self.core.stores.by_address)))
        chosen = data.draw(st.lists(st.sampled_from(sorted(worker.pending)), min_size=1, max_size=3, unique=True))
        self.cluster.complete_stored(worker, chosen, holder=holder)

    @precondition(lambda self: any(worker.pending for worker in self.good_workers))
    @rule(data=st.data())
    def reader_misses_its_inputs(self, data: st.DataObject) -> None:
        """A worker could not fetch the stored inputs it was sent: it reports them lost and gives tasks back."""
        worker = data.draw(st.sampled_from([w for w in self.good_workers if w.pending]))
        in_stores = sorted(oid for oid in worker.objects if oid in self.core.objects.stored
                           and self.core.objects.stored[oid].holders)
        if in_stores:
            lost = data.draw(st.lists(st.sampled_from(in_stores), min_size=1, max_size=2, unique=True))
            self.cluster.send(worker.identity, m.ObjectsLost(object_ids=lost))
        chosen = data.draw(st.lists(st.sampled_from(sorted(worker.pending)), min_size=1, max_size=3, unique=True))
        self.cluster.complete(worker, task_ids=chosen, failure_kind=m.FailureKind.RETURNED)

    @precondition(lambda self: len(self.cluster.stores) < 3)
    @rule(host=st.sampled_from(["host-a", "host-b"]), capacity=st.integers(0, 3000))
    def add_store(self, host: str, capacity: int) -> None:
        self.cluster.add_store(
            f"tcp://good-store-{self.stores_made}:1", host_key=host, capacity_bytes=capacity,
            identity=b"good-store-%d" % self.stores_made,
        )
        self.stores_made += 1

    @precondition(lambda self: self.cluster.stores)
    @rule(data=st.data(), silently=st.booleans())
    def store_leaves(self, data: st.DataObject, silently: bool) -> None:
        store = data.draw(st.sampled_from(sorted(self.cluster.stores.values(), key=lambda store: store.identity)))
        if not silently:
            self.cluster.send(store.identity, m.Disconnect(reason="bye"))
            assert store.identity not in self.core.stores.stores
        del self.cluster.stores[store.identity]

    @precondition(lambda self: self.cluster.stores and self.core.objects.in_stores)
    @rule(data=st.data(), lost=st.booleans())
    def store_reports(self, data: st.DataObject, lost: bool) -> None:
        """A store lost objects it held (an unreadable spill file, a lender that exited), or fetched copies."""
        store = data.draw(st.sampled_from(sorted(self.cluster.stores.values(), key=lambda store: store.identity)))
        known = sorted(oid for oid, item in self.core.objects.stored.items() if item.holders or item.lost)
        chosen = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=3, unique=True))
        if lost:
            self.cluster.send(store.identity, m.ObjectsLost(object_ids=chosen))
        else:
            self.cluster.send(store.identity, m.ObjectsHeld(object_ids=chosen, sizes=[100] * len(chosen)))

    @precondition(lambda self: self.cluster.stores)
    @rule(data=st.data(), held=st.integers(0, 4000), spilled=st.integers(0, 4000))
    def store_heartbeats(self, data: st.DataObject, held: int, spilled: int) -> None:
        store = data.draw(st.sampled_from(sorted(self.cluster.stores.values(), key=lambda store: store.identity)))
        self.cluster.send(store.identity, m.Heartbeat(bytes_held=held, bytes_spilled=spilled))

    @precondition(lambda self: self.good_clients)
    @rule(
        data=st.data(), count=st.integers(1, 5), tags=TAG_SETS,
        wait_for_tags_ms=st.sampled_from([0, 0, 500, 5000]),
    )
    def submit(self, data: st.DataObject, count: int, tags: list[str], wait_for_tags_ms: int) -> None:
        client = data.draw(st.sampled_from(self.good_clients))
        task_ids = self.cluster.submit(client, count, tags=tags, wait_for_tags_ms=wait_for_tags_ms)
        rejected = [f for f in client.failures(m.FailureKind.REJECTED) if f.task_id in task_ids]
        assert not rejected, f"a good task was rejected: {rejected}"
        self.expected[client.identity].update(task_ids)

    @precondition(lambda self: any(self.open_tasks(client) for client in self.good_clients))
    @rule(data=st.data())
    def submit_dependent(self, data: st.DataObject) -> None:
        """A graph task whose argument is the result of one of the client's unfinished tasks."""
        client = data.draw(st.sampled_from([c for c in self.good_clients if self.open_tasks(c)]))
        dependency = data.draw(st.sampled_from(self.open_tasks(client)))
        (task_id,) = client.next_task_ids(1)
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=2, keywords=(), task_ids=[task_id], args=[b"", b"constant"],
            ref_arg_indices=[0], ref_task_ids=[dependency],
        )
        self.cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group]))
        assert not client.outcomes.get(task_id), client.outcomes.get(task_id)
        self.expected[client.identity].add(task_id)

    @rule(data=st.data(), count=st.integers(1, 3))
    def submit_kept(self, data: st.DataObject, count: int) -> None:
        """Tasks whose outcomes the scheduler keeps for the client (TaskGroup.keepResults)."""
        client = data.draw(st.sampled_from(self.good_clients))
        task_ids = client.next_task_ids(count)
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
            args=[b"kept"] * count, keep_results=True,
        )
        objects = [] if FUNCTION_ID in client.sent_objects else [
            m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")
        ]
        client.sent_objects.add(FUNCTION_ID)
        self.cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
        self.expected[client.identity].update(task_ids)
        self.kept[client.identity].update(task_ids)

    @precondition(lambda self: any(self.kept[client.identity] for client in self.good_clients))
    @rule(data=st.data())
    def submit_on_kept(self, data: st.DataObject) -> None:
        """A task naming a kept task the client has not released, finished or not: never rejected."""
        client = data.draw(st.sampled_from([c for c in self.good_clients if self.kept[c.identity]]))
        dependency = data.draw(st.sampled_from(sorted(self.kept[client.identity])))
        (task_id,) = client.next_task_ids(1)
        group = m.TaskGroup(
            function_id=FUNCTION_ID, args_per_task=2, keywords=(), task_ids=[task_id], args=[b"", b"constant"],
            ref_arg_indices=[0], ref_task_ids=[dependency],
        )
        self.cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group]))
        # A kept task that failed passes its failure on, whatever its kind: a (bad) worker holding it may well
        # have answered `rejected`. Only a rejection of the new task itself is wrong.
        inherited = {outcome.kind for kind, outcome in client.outcomes.get(dependency, []) if kind == "failed"}
        rejected = [
            f for f in client.failures(m.FailureKind.REJECTED) if f.task_id == task_id and f.kind not in inherited
        ]
        assert not rejected, f"a task on kept task {dependency:#x} was rejected: {rejected}"
        self.expected[client.identity].add(task_id)

    @precondition(lambda self: any(self.released_kept(client) for client in self.good_clients))
    @rule(data=st.data())
    def release_kept(self, data: st.DataObject) -> None:
        """The client lets go of a finished kept task's outcome, as ScalerFuture.release() does."""
        client = data.draw(st.sampled_from([c for c in self.good_clients if self.released_kept(c)]))
        task_id = data.draw(st.sampled_from(self.released_kept(client)))
        kind, outcome = client.outcomes[task_id][-1]
        object_id = outcome.object_id if kind == "stored" else kept_result_id(task_id)
        self.cluster.send(client.identity, m.DeleteObjects(object_ids=[object_id]))
        self.kept[client.identity].discard(task_id)

    def released_kept(self, client: SimClient) -> list[int]:
        """The client's kept tasks that have their outcome and are not running again: those it may release."""
        records = self.core.tasks.records
        return sorted(
            task_id for task_id in self.kept[client.identity]
            if client.outcomes.get(task_id) and task_id not in records
        )

    @precondition(lambda self: any(self.open_tasks(client) for client in self.good_clients))
    @rule(data=st.data(), force=st.booleans())
    def cancel(self, data: st.DataObject, force: bool) -> None:
        client = data.draw(st.sampled_from([c for c in self.good_clients if self.open_tasks(c)]))
        chosen = data.draw(st.lists(st.sampled_from(self.open_tasks(client)), min_size=1, max_size=3, unique=True))
        self.cluster.send(client.identity, m.CancelTasks(task_ids=chosen, force=force))

    @precondition(lambda self: len(self.good_clients) > 1)
    @rule(data=st.data())
    def client_leaves(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(self.good_clients[1:]))
        self.cluster.send(client.identity, m.Disconnect(reason="done"))
        assert client.identity not in self.core.peers.clients
        self.good_clients.remove(client)
        del self.expected[client.identity]
        del self.cluster.clients[client.identity]

    @precondition(lambda self: any(worker.pending for worker in self.good_workers))
    @rule(
        data=st.data(), kind=st.one_of(st.none(), st.sampled_from(ANSWERING_KINDS)),
        # How long each task ran, as the worker says (prefetch's pace); None: a worker that does not say.
        task_seconds=st.one_of(st.none(), st.sampled_from([0.0, 25e-6, 0.01, 0.5, 5.0])),
    )
    def worker_answers(self, data: st.DataObject, kind: m.FailureKind | None, task_seconds: float | None) -> None:
        worker = data.draw(st.sampled_from([w for w in self.good_workers if w.pending]))
        count = data.draw(st.integers(1, len(worker.pending)))
        self.cluster.complete(worker, count, failure_kind=kind, task_seconds=task_seconds)

    @precondition(lambda self: any(worker.pending for worker in self.good_workers))
    @rule(data=st.data())
    def worker_refuses_cancel(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from([w for w in self.good_workers if w.pending]))
        chosen = data.draw(st.lists(st.sampled_from(sorted(worker.pending)), min_size=1, max_size=3, unique=True))
        self.cluster.send(worker.identity, m.CancelRefused(task_ids=chosen))

    @precondition(lambda self: any(worker.pending for worker in self.good_workers))
    @rule(data=st.data())
    def worker_reports_start(self, data: st.DataObject) -> None:
        """A worker says it is about to run tasks it holds (as it must for reportStart ones): each is acknowledged."""
        worker = data.draw(st.sampled_from([w for w in self.good_workers if w.pending]))
        chosen = data.draw(st.lists(st.sampled_from(sorted(worker.pending)), min_size=1, max_size=3, unique=True))
        tasks = self.core.tasks.records
        # The harness's worker may still list tasks canceled meanwhile: those are not answered.
        core_worker = self.core.peers.workers[worker.identity]
        held = [task_id for task_id in chosen if task_id in tasks and tasks[task_id].worker is core_worker]
        out = self.cluster.send(worker.identity, m.TaskStarted(task_ids=chosen))
        assert out == ([(worker.identity, m.TaskStarted(task_ids=held))] if held else []), out
        assert all(tasks[task_id].started for task_id in held)

    @precondition(lambda self: self.good_clients and self.core.peers.workers)
    @rule(data=st.data(), unknown=st.lists(st.sampled_from(["nobody", "good-worker-99", ""]), max_size=2))
    def drain_workers(self, data: st.DataObject, unknown: list[str]) -> None:
        """A good client drains some workers (good or bad, again or for the first time), and names some unknown."""
        client = data.draw(st.sampled_from(self.good_clients))
        workers = self.core.peers.workers
        chosen = data.draw(st.lists(st.sampled_from(sorted(workers)), min_size=1, max_size=2, unique=True))
        names = [workers[identity].name for identity in chosen] + unknown
        known = {worker.name for worker in workers.values()}
        self.note_drains(chosen)
        out = self.cluster.send(client.identity, m.DrainWorkers(worker_names=names))
        expected = m.DrainWorkersResponse(
            draining=[name for name in dict.fromkeys(names) if name in known],
            unknown=[name for name in dict.fromkeys(names) if name not in known],
        )
        assert out[-1] == (client.identity, expected), out
        assert all(workers[identity].draining for identity in chosen)

    def note_drains(self, identities: list[bytes]) -> None:
        for identity in identities:
            peer = self.core.peers.workers[identity]
            if identity not in self.drained_at or self.drained_at[identity][0] is not peer:
                worker = self.cluster.workers.get(identity)
                self.drained_at[identity] = (peer, len(worker.inbox) if worker is not None else 0)

    @precondition(lambda self: self.good_workers)
    @rule()
    def workers_obey_release(self) -> None:
        """Workers give back what the scheduler asked them to release, as the protocol says."""
        for worker in self.good_workers:
            inbox = worker.inbox[self.read_upto[worker.identity]:]
            self.read_upto[worker.identity] = len(worker.inbox)
            released = [
                task_id for message in inbox if isinstance(message, m.ReleaseTasks)
                for task_id in message.task_ids if task_id in worker.pending
            ]
            if released:
                self.cluster.complete(
                    worker, task_ids=list(dict.fromkeys(released)), failure_kind=m.FailureKind.RETURNED
                )

    @precondition(lambda self: self.good_workers)
    @rule(data=st.data(), silently=st.booleans())
    def worker_leaves(self, data: st.DataObject, silently: bool) -> None:
        """A worker says goodbye, or its process dies and it goes silent until it times out."""
        worker = data.draw(st.sampled_from(self.good_workers))
        if not silently:
            self.cluster.send(worker.identity, m.Disconnect(reason="bye"))
            assert worker.identity not in self.core.peers.workers
        self.cluster.forget_worker(worker)

    @rule(advance=st.sampled_from([0.0, 0.5, 1.0, 5.0, PEER_TIMEOUT + 1]))
    def time_passes(self, advance: float) -> None:
        """Good peers heartbeat on time; bad and dead ones stay silent and time out."""
        self.cluster.now += advance
        self.cluster.heartbeat_all()
        self.cluster.tick()

    # ------------------------------------------------------------------------------------------ bad peers

    def id_pool(self) -> st.SearchStrategy[int]:
        """Task ids aimed at real tasks (anybody's), at real prefixes, and anywhere."""
        live = sorted(self.core.tasks.records)
        prefixes = st.integers(0, self.core.peers.next_id_prefix + 1)
        choices = [forged_task_ids(prefixes), U64]
        if live:
            choices.insert(0, st.sampled_from(live))
        return st.one_of(*choices)

    def object_pool(self) -> st.SearchStrategy[bytes]:
        return st.sampled_from(sorted({FUNCTION_ID, *self.core.objects.stored}))

    def send_bad(self, sender: bytes, message: m.Message) -> None:
        """Send as a bad peer and check the reply against PROTOCOL.md §3; no good task may be touched."""
        core = self.core
        was_client, was_worker = sender in core.peers.clients, sender in core.peers.workers
        was_store = sender in core.stores.stores
        address_taken = isinstance(message, m.Hello) and message.data_address in core.stores.by_address
        # A registered client or store that says hello naming its own prefix or data address comes back (§23).
        comes_back = isinstance(message, m.Hello) and message.protocol_version == m.PROTOCOL_VERSION and (
            (was_client and 0 != message.id_prefix == core.peers.clients[sender].id_prefix)
            or (was_store and message.data_address == core.stores.stores[sender].data_address)
        )
        before = core_snapshot(core)
        good_state = {
            task_id: (record.worker.identity if record.worker else None, record.waiting_on > 0)
            for task_id, record in core.tasks.records.items()
            if record.client.identity in self.expected
        }
        outcomes_before = {
            task_id: (client, len(client.outcomes.get(task_id, ())))
            for client in self.good_clients for task_id in self.expected[client.identity]
        }
        if was_client and isinstance(message, m.DrainWorkers):
            self.note_drains([w.identity for w in core.peers.workers.values() if w.name in message.worker_names])
        out = self.cluster.send(sender, message)
        to_sender = [reply for identity, reply in out if identity == sender]

        def ignored_with(reply_type: type | None) -> None:
            assert [type(reply) for reply in to_sender] == ([reply_type] if reply_type else []), out
            assert len(out) == len(to_sender), out
            assert core_snapshot(core) == before, "a message that should be dropped changed the scheduler"

        if isinstance(message, m.Hello):
            if comes_back:
                assert [type(reply) for reply in to_sender] == [m.Welcome] and len(out) == 1, out
            elif was_client or was_worker or was_store:
                ignored_with(m.ProtocolError)
            elif message.protocol_version != m.PROTOCOL_VERSION:
                ignored_with(m.Refused)
            elif message.role == m.Role.WORKER and (message.capacity == 0 or "" in message.tags):
                ignored_with(m.Refused)
            elif message.role == m.Role.STORE and (not message.data_address or address_taken):
                ignored_with(m.Refused)
            elif message.role == m.Role.CLIENT and share_problem(message.share) is not None:
                ignored_with(m.Refused)
            else:
                assert isinstance(to_sender[0], m.Welcome), out
        elif not (was_client or was_worker or was_store):
            ignored_with(m.Refused)
        elif type(message) not in (CLIENT_SENDS if was_client else WORKER_SENDS if was_worker else STORE_SENDS):
            ignored_with(m.ProtocolError)
        elif was_client and isinstance(message, m.ShutdownRequest):
            assert [type(reply) for reply in to_sender] == [m.ShutdownResponse] and not to_sender[0].accepted, out
        elif (
            was_worker and isinstance(message, m.TaskResults)
            and len(message.succeeded_ids) != len(message.payloads)
        ):
            ignored_with(m.ProtocolError)
        if isinstance(message, m.Disconnect):
            assert sender not in core.peers.clients and sender not in core.peers.workers
            assert sender not in core.stores.stores

        # Tasks of good clients: only those the sender held (and graph tasks waiting on them) may change
        # hands or end; queued ones may only be handed out by dispatch.
        for task_id, (holder, parked) in good_state.items():
            record = core.tasks.records.get(task_id)
            if holder is not None and holder != sender:
                assert record is not None and record.worker is not None and record.worker.identity == holder, task_id
            if not parked and (holder != sender or not was_worker):
                client, count = outcomes_before[task_id]
                assert len(client.outcomes.get(task_id, ())) == count, f"bad message ended good task {task_id:#x}"

    @rule(sender=st.sampled_from(BAD_IDENTITIES), hello=hellos())
    def bad_hello(self, sender: bytes, hello: m.Hello) -> None:
        self.send_bad(sender, hello)

    @rule(sender=st.sampled_from(BAD_IDENTITIES), role=st.sampled_from(list(m.Role)), capacity=st.integers(1, 3))
    def bad_peer_says_a_proper_hello(self, sender: bytes, role: m.Role, capacity: int) -> None:
        """So that the rule-breaking below comes from known peers too, not only from strangers."""
        data_address = f"tcp://{sender.decode()}:{capacity}" if role == m.Role.STORE else ""
        self.send_bad(sender, m.Hello(role=role, capacity=capacity, name=sender.decode(), data_address=data_address))

    @rule(sender=st.sampled_from(BAD_IDENTITIES), data=st.data())
    def bad_random_message(self, sender: bytes, data: st.DataObject) -> None:
        strategies = message_strategies(self.id_pool(), self.object_pool(), paired_results=False)
        kind = data.draw(st.sampled_from(sorted(strategies, key=lambda kind: kind.__name__)))
        self.send_bad(sender, data.draw(strategies[kind]))

    @rule(sender=st.sampled_from(BAD_IDENTITIES), data=st.data(), paired=st.booleans())
    def bad_results(self, sender: bytes, data: st.DataObject, paired: bool) -> None:
        """Results and failures for tasks the sender was never given, or was, named twice, mismatched."""
        pool = self.id_pool()
        held = sorted(self.core.peers.workers[sender].assigned) if sender in self.core.peers.workers else []
        if held:
            pool = st.one_of(st.sampled_from(held), pool)
        results = data.draw(task_results(pool, paired))
        if data.draw(st.booleans()):
            results.failures = results.failures + results.failures  # the same task named twice
        self.send_bad(sender, results)

    @rule(sender=st.sampled_from(BAD_IDENTITIES), data=st.data())
    def bad_submission(self, sender: bytes, data: st.DataObject) -> None:
        """Groups that are almost right: the sender's own prefix (when it has one), objects it did or did not
        upload, references to tasks that are its own, someone else's, later in the group, or finished."""
        own = self.core.peers.clients.get(sender)
        prefixes = st.sampled_from([own.id_prefix]) if own else st.integers(0, self.core.peers.next_id_prefix)
        ids = st.one_of(forged_task_ids(prefixes), self.id_pool())
        # Drawn, not random: a replay of this step must draw the same id, or hypothesis cannot shrink a failure.
        object_id = data.draw(st.binary(min_size=OBJECT_ID_BYTES, max_size=OBJECT_ID_BYTES))
        objects = data.draw(st.lists(st.sampled_from([
            m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f"),
            m.ObjectPayload(object_id=object_id, payload=b"object", name="o"),
        ]), max_size=2))
        known = st.sampled_from(sorted({FUNCTION_ID, object_id, *self.core.objects.stored}))
        groups = data.draw(st.lists(task_groups(ids, known, consistent=data.draw(st.booleans())), max_size=3))
        for group in groups:
            # Object arguments that name real objects, so the later checks (references) get their turn.
            for index in group.object_arg_indices:
                if index < len(group.args) and data.draw(st.booleans()):
                    group.args[index] = data.draw(known)
        quiet = data.draw(st.lists(ids, max_size=2))
        self.send_bad(sender, m.TaskSubmission(objects=objects, groups=groups, quiet_task_ids=quiet))

    def bad_workers_holding_tasks(self) -> list[bytes]:
        workers = self.core.peers.workers
        return [identity for identity in BAD_IDENTITIES if identity in workers and workers[identity].assigned]

    @precondition(lambda self: self.bad_workers_holding_tasks())
    @rule(data=st.data(), payload=SMALL_BYTES)
    def bad_worker_answers_what_it_holds(self, data: st.DataObject, payload: bytes) -> None:
        """A bad worker that does hold tasks answers them wrongly: twice, with several kinds at once."""
        sender = data.draw(st.sampled_from(self.bad_workers_holding_tasks()))
        worker = self.core.peers.workers[sender]
        held = data.draw(st.lists(st.sampled_from(sorted(worker.assigned)), min_size=1, max_size=4))
        kinds = data.draw(st.lists(st.sampled_from(list(m.FailureKind)), min_size=1, max_size=3))
        failures = [m.TaskFailure(task_id=task_id, kind=kind) for task_id in held for kind in kinds]
        succeeded = data.draw(st.lists(st.sampled_from(held), max_size=2))
        self.send_bad(sender, m.TaskResults(succeeded_ids=succeeded, payloads=[payload] * len(succeeded),
                                            failures=failures))

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def core_is_consistent(self) -> None:
        self.core.check_invariants()

    @invariant()
    def good_peers_are_served(self) -> None:
        for client in self.good_clients:
            assert not client.received(m.Refused) and not client.received(m.ProtocolError), client.inbox[-3:]
            owned = self.core.peers.clients[client.identity].object_ids
            for task_id, outcomes in client.outcomes.items():
                assert task_id in self.expected[client.identity], f"{client.identity!r} got a stranger's {task_id:#x}"
                # One outcome; only a stored result that was lost before its client let go of it is followed by
                # another (the task ran again).
                for kind, earlier in outcomes[:-1]:
                    assert kind == "stored" and earlier.object_id not in owned, (
                        f"task {task_id:#x} has {len(outcomes)} outcomes: {outcomes}"
                    )
        for worker in self.good_workers:
            assert not worker.received(m.Refused) and not worker.received(m.ProtocolError), worker.inbox[-3:]
            held = self.core.peers.workers[worker.identity].assigned
            assert set(held) <= set(worker.pending), "the scheduler thinks a worker holds a task it never got"
        for store in self.cluster.stores.values():
            assert not store.received(m.Refused) and not store.received(m.ProtocolError), store.inbox[-3:]

    @invariant()
    def peers_know_the_stores(self) -> None:
        """Every good client and worker holds the current directory, and a home among its stores."""
        registered = sorted(self.core.stores.by_address)
        for peer in [*self.good_clients, *self.good_workers]:
            directory = last_directory(peer.inbox)
            assert [entry.data_address for entry in directory.stores] == registered, (directory, registered)
            assert directory.home_store in registered if registered else directory.home_store == ""

    @invariant()
    def drained_workers_get_nothing_new(self) -> None:
        workers = self.core.peers.workers
        for identity, (peer, drained_at) in list(self.drained_at.items()):
            if workers.get(identity) is not peer:
                del self.drained_at[identity]  # it left; a hello from the same identity is a new worker
                continue
            assert peer.draining, f"worker {identity!r} stopped draining"
            worker = self.cluster.workers.get(identity)
            if worker is not None:
                late = [message for message in worker.inbox[drained_at:] if isinstance(message, m.TaskSubmission)]
                assert not late, f"drained worker {identity!r} was sent tasks: {late}"

    @invariant()
    def no_task_waits_beside_a_free_worker_that_may_run_it(self) -> None:
        for queue in self.core.tasks.queues.values():
            if queue.waiting:
                # Room as dispatch counts it: free slots, within the worker's depth for the next tasks' function.
                free = [w.name for w in self.core.workers()
                        if self.core.room(queue, w) > 0 and not w.draining and w.tags.issuperset(queue.tags)]
                assert not free, f"{queue.waiting} tasks requiring {queue.tags} wait while {free} have room"
        waiting_for_tags = self.core.status(self.cluster.now).waiting_for_tags
        for wait in waiting_for_tags:
            assert not any(w.tags.issuperset(wait.tags) for w in self.core.workers()), wait

    def teardown(self) -> None:
        """Silent peers time out, good workers answer everything: each good task has exactly one outcome."""
        cluster = self.cluster
        # A worker that may run anything, so that tasks waiting for tags nobody had get their turn too.
        self.add_worker(capacity=3, tags=TAG_POOL)
        for _ in range(100):
            # Time first: the silent peers time out and their leftovers go with them; a result stored only in a
            # silent store is lost with it, and its task runs again (lineage), so the good workers answer after.
            self.time_passes(PEER_TIMEOUT + 1)
            for worker in self.good_workers:
                if worker.pending:
                    cluster.complete(worker)
            self.core.check_invariants()
            if all(not self.open_tasks(client) for client in self.good_clients):
                break
        for client in self.good_clients:
            missing = self.open_tasks(client)
            assert not missing, f"{len(missing)} tasks of {client.identity!r} never finished"
        assert set(self.core.peers.clients) == {client.identity for client in self.good_clients}
        assert_no_task_state(self.core)
        self.core.check_invariants()


SchedulerCoreFuzz.TestCase.settings = settings(
    database=None,
    derandomize=True,
    deadline=None,
    max_examples=examples(75),
    stateful_step_count=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_scheduler_core_under_fuzzed_peers = SchedulerCoreFuzz.TestCase


# ---------------------------------------------------------------------------------------------- regressions
# Bugs the fuzzing above found, each pinned by the shortest sequence that showed it.


def test_cancel_requested_task_of_a_worker_that_leaves_does_not_lose_a_queued_task():
    """A running task the client canceled came back from a departing worker: the queue count went one low,
    so the next queued task was never dispatched."""
    cluster = SimulatedCluster(CONFIG)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=1)
    running, queued = cluster.submit(client, 2)
    cluster.cancel(client, [running])
    cluster.send(worker.identity, m.Disconnect())
    assert cluster.core.unassigned_count == 1
    cluster.core.check_invariants()
    other = cluster.add_worker(capacity=1)
    assert list(other.pending) == [queued]
    cluster.run_to_completion()
    assert [outcome[0] for outcome in client.outcomes[running]] == ["failed"]
    assert client.outcomes[running][0][1].kind == m.FailureKind.CANCELED
    assert [outcome[0] for outcome in client.outcomes[queued]] == ["ok"]
    assert_no_task_state(cluster.core)


@pytest.mark.parametrize("kinds", [
    (m.FailureKind.RETURNED, m.FailureKind.RETURNED),
    (m.FailureKind.WORKER_DIED, m.FailureKind.RETURNED),
    (m.FailureKind.RETURNED, m.FailureKind.RAISED),
])
def test_a_worker_naming_one_task_twice_in_its_failures_does_not_queue_it_twice(kinds):
    """Both entries put the task back in the queue (or ended it and queued it anyway): it was then handed to
    two workers, one of which kept a slot for it forever, and removing that worker raised KeyError."""
    cluster = SimulatedCluster(CONFIG)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=1)
    (task_id,) = cluster.submit(client, 1)
    worker.pending.clear()
    failures = [m.TaskFailure(task_id=task_id, kind=kind) for kind in kinds]
    cluster.send(worker.identity, m.TaskResults(succeeded_ids=[], payloads=[], failures=failures))
    cluster.core.check_invariants()
    second = cluster.add_worker(capacity=1)
    cluster.core.check_invariants()
    cluster.send(worker.identity, m.Disconnect())
    cluster.forget_worker(worker)
    cluster.core.check_invariants()
    cluster.run_to_completion()
    assert len(client.outcomes[task_id]) == 1
    assert second.received_task_ids.count(task_id) <= 1
    assert_no_task_state(cluster.core)


def test_an_argument_that_is_both_an_object_and_a_task_reference_is_rejected():
    """The result overwrote the object id, and dispatch then looked the result up as an object: KeyError
    while handling the worker's results, so the client never got the dependency's result either."""
    cluster = SimulatedCluster(CONFIG)
    client = cluster.add_client()
    worker = cluster.add_worker(capacity=5)
    object_id = random_object_id()
    first, second = client.next_task_ids(2)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[first, second], args=[b"x", object_id],
        ref_arg_indices=[1], ref_task_ids=[first], object_arg_indices=[1],
    )
    objects = [m.ObjectPayload(FUNCTION_ID, FUNCTION_PAYLOAD), m.ObjectPayload(object_id, b"object")]
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
    for task_id in (first, second):
        ((status, failure),) = client.outcomes[task_id]
        assert status == "failed" and failure.kind == m.FailureKind.REJECTED
        assert "both an object argument and a task reference" in failure.message
    assert worker.pending == {}
    assert_no_task_state(cluster.core)


def test_canceling_a_task_and_its_dependent_together_gives_each_one_outcome():
    """The dependent ended with its dependency's cancel, then its own id in the same cancel got notFound."""
    cluster = SimulatedCluster(CONFIG)
    client = cluster.add_client()
    (dependency,) = cluster.submit(client, 1)  # no worker: stays queued
    (dependent,) = client.next_task_ids(1)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[dependent], args=[b""],
        ref_arg_indices=[0], ref_task_ids=[dependency],
    )
    cluster.send(client.identity, m.TaskSubmission(objects=[], groups=[group]))
    cluster.send(client.identity, m.CancelTasks(task_ids=[dependency, dependent, dependent]))
    for task_id in (dependency, dependent):
        ((status, failure),) = client.outcomes[task_id]
        assert status == "failed" and failure.kind == m.FailureKind.CANCELED
    assert_no_task_state(cluster.core)
