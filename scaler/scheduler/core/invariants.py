"""What must hold between the parts of the core after every input: the tests check it after each step.

It walks every task, peer, object and edge, so it is for tests only (the unit tests' simulated cluster
and the fuzzing state machine call `SchedulerCore.check_invariants()` after every message); the
scheduler itself never runs it.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping

from scaler.scheduler.core.client_summary import ClientSummary
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.object_lifetime.lineage import Lineage
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.peer_registry import ClientPeer, PeerRegistry, WorkerPeer
from scaler.scheduler.core.ready_queue import ReadyQueue
from scaler.scheduler.core.store_registry import StoreRegistry
from scaler.scheduler.core.task_graph import TaskGraph
from scaler.scheduler.core.task_table import TaskTable
from scaler.utility.identifiers import TASK_COUNTER_BITS


class CoreInvariantError(AssertionError):
    """The core's structures disagree with each other: a bug in the core."""


def _check_stores(stores: StoreRegistry, other_identities: set[bytes]) -> None:
    """Each store is filed once under its identity and once under its (non-empty) data address."""
    _require(not stores.stores.keys() & other_identities, "an identity is both a store and a client or worker")
    _require(len(stores.stores) == len(stores.by_address),
             "%d stores by identity, %d by data address", len(stores.stores), len(stores.by_address))
    for identity, store in stores.stores.items():
        _require(store.identity == identity, "store %r is filed under %r", store.identity, identity)
        _require(store.data_address != "" and stores.by_address.get(store.data_address) is store,
                 "store %r is not filed under its data address %r", identity, store.data_address)


def _check_lineage(lineage: Lineage, tasks: TaskTable, objects: ObjectTable) -> None:
    """Lost objects are marked and known as such; nothing queued or sent names one; reruns are live tasks."""
    stored = objects.stored
    for object_id, item in stored.items():
        _require(item.lost == (object_id in lineage.lost), "object %s lost: %s, lineage says otherwise",
                 object_id.hex(), item.lost)
        _require(not (item.lost and item.holders), "lost object %s has holders", object_id.hex())
    for object_id in lineage.lost:
        _require(object_id in stored, "lost object %s is no longer in the table", object_id.hex())
    for record in tasks.queued_records():
        for object_id in (record.signature.function_id, record.signature.serializer_id):
            _require(object_id not in lineage.lost, "queued task %#x needs a lost object", record.task_id)
        for slot in record.object_slots or ():
            _require(bytes(record.args[slot]) not in lineage.lost, "queued task %#x needs a lost object",
                     record.task_id)
    for task_id in lineage.reruns:
        _require(task_id in tasks.records, "rerun %#x is no longer a task", task_id)
    for object_id in lineage.recipes:
        _require(object_id in stored or lineage.input_refs.get(object_id, 0) > 0,
                 "the recipe of %s is kept though nothing needs it", object_id.hex())


def _check_queue(queue: ReadyQueue, clients: dict[bytes, ClientPeer]) -> None:
    """Each lane holds only its client's tasks of its depth, priority and tags, counted right, the back of
    each level in the order they became ready; every lane with tasks has exactly one turn, at its virtual time."""
    tags = queue.tags
    for (client, depth), lane in queue.lanes.items():
        _require(lane.client is client and lane.depth == depth, "a lane is filed under another client or depth")
        _require(clients.get(client.identity) is client, "the queue of %s keeps a lane of a client that left",
                 sorted(tags))
        _require(sorted(lane.priorities) == sorted(lane.levels) and len(set(lane.priorities)) == len(lane.priorities),
                 "a lane's priority heap %s does not list its levels %s", lane.priorities, sorted(lane.levels))
        _require(_is_heap(lane.priorities), "a lane's priorities are not a heap")
        _require(lane.head is (lane.levels[lane.priorities[0]] if lane.priorities else None),
                 "a lane's head is not its highest level")
        live_count = 0
        _require(set(lane.fronts) <= set(lane.levels), "a lane counts the front of a level it does not have")
        for key, level in lane.levels.items():
            front = lane.fronts.get(key, 0)
            _require(level and 0 <= front <= len(level) and (key not in lane.fronts or front > 0),
                     "a level is empty or counts %d in front", front)
            last_ready = -math.inf
            for index, record in enumerate(level):
                if record.canceled:
                    continue
                live_count += 1
                _require(record.client is client and record.signature.nesting_depth == depth
                         and record.signature.required_tags == tags and -record.priority == key,
                         "task %#x (priority %d) is queued in another lane or level", record.task_id, record.priority)
                if index >= front:
                    _require(record.ready_since >= last_ready, "task %#x is queued behind a task ready later",
                             record.task_id)
                    last_ready = record.ready_since
        _require(live_count == lane.waiting, "a lane holds %d live tasks, its count says %d", live_count, lane.waiting)
    _require(queue.waiting == sum(lane.waiting for lane in queue.lanes.values()),
             "the queue of tags %s counts %d tasks, its lanes say otherwise", sorted(tags), queue.waiting)
    turn_lanes = [turn[3] for turn in queue.turns]
    _require(len({id(lane) for lane in turn_lanes}) == len(turn_lanes), "a lane has two turns")
    _require(_is_heap(queue.turns), "the turns are not a heap")
    lanes = set(map(id, queue.lanes.values()))
    for neg_depth, virtual, _, lane in queue.turns:
        _require(id(lane) in lanes, "a turn is given to a lane the queue does not have")
        _require(-neg_depth == lane.depth and virtual == lane.virtual, "a turn is out of date")
    for lane in queue.lanes.values():
        _require(lane.in_turns == any(turn_lane is lane for turn_lane in turn_lanes), "a lane's in_turns is wrong")
        _require(not lane.waiting or lane.in_turns, "a lane with %d tasks has no turn", lane.waiting)


def _is_heap(items: list) -> bool:
    return all(not items[(index - 1) // 2] > items[index] for index in range(1, len(items)))


def _check_client_counts(tasks: TaskTable, clients: dict[bytes, ClientPeer]) -> None:
    """Each client's counters, and its summary for the monitor, agree with a scan of its tasks."""
    queued: collections.Counter[bytes] = collections.Counter()
    oldest: dict[bytes, float] = {}
    for record in tasks.queued_records():
        identity = record.client.identity
        queued[identity] += 1
        oldest[identity] = min(oldest.get(identity, math.inf), record.ready_since)
    running = collections.Counter(
        record.client.identity for record in tasks.records.values() if record.worker is not None
    )
    for identity, client in clients.items():
        _require(client.tasks_queued == queued[identity] and client.tasks_running == running[identity],
                 "client %r counts %d queued and %d running tasks, a scan says %d and %d", identity,
                 client.tasks_queued, client.tasks_running, queued[identity], running[identity])
        summary = tasks.client_summary(client, tasks.now)
        expected = max(0.0, tasks.now - oldest[identity]) if identity in oldest else 0.0
        _require(summary == ClientSummary(queued[identity], running[identity], expected),
                 "client %r's summary %s disagrees with a scan (oldest ready %s)", identity, summary, expected)


def _require(condition: object, message: str, *values: object) -> None:
    # The message is formatted only on failure: the tests call this for every task after every message.
    if not condition:
        raise CoreInvariantError(message % values if values else message)


def check_invariants(
    config: CoreConfig, peers: PeerRegistry, stores: StoreRegistry, tasks: TaskTable, graph: TaskGraph,
    objects: ObjectTable, lineage: Lineage, should_exit: bool, held_back: Mapping[int, object] | None = None,
    room_for: Callable[[ReadyQueue, WorkerPeer], int] | None = None,
) -> None:
    """Raise CoreInvariantError unless tasks, peers, the queue, graph edges and objects agree. `room_for` is how many
    of a queue's next tasks a worker may take (placement.py: its free slots, within its depth for their functions)."""
    records, clients, workers, stored = tasks.records, peers.clients, peers.workers, objects.stored
    _require(not clients.keys() & workers.keys(), "an identity is both a client and a worker")
    _check_stores(stores, clients.keys() | workers.keys())
    for identity, client in clients.items():
        _require(client.identity == identity, "client %r is filed under %r", client.identity, identity)
        for task_id in client.task_ids:
            listed = records.get(task_id)
            _require(listed is not None and listed.client is client, "client %r lists task %#x", identity, task_id)
        for object_id in client.object_ids:
            _require(object_id in stored and identity in stored[object_id].owners,
                     "client %r lists object %s it does not own", identity, object_id.hex())
    for identity, worker in workers.items():
        _require(worker.identity == identity, "worker %r is filed under %r", worker.identity, identity)
        _require(0 < worker.capacity and len(worker.assigned) <= worker.capacity,
                 "worker %r holds %d tasks with capacity %d", identity, len(worker.assigned), worker.capacity)
        for task_id in worker.assigned:
            held = records.get(task_id)
            _require(held is not None and held.worker is worker, "worker %r holds task %#x", identity, task_id)
            _require(held is None or worker.tags.issuperset(held.signature.required_tags),
                     "worker %r with tags %s holds task %#x requiring others", identity, sorted(worker.tags), task_id)
        _require(worker.known_object_ids <= stored.keys(), "worker %r keeps an object the scheduler freed", identity)

    live_queue = tasks.queued_records()
    if tasks.waiting:
        # Dispatch runs after every input that can queue a task or free a slot; only draining workers are skipped.
        for queue in tasks.queues.values():
            if queue.waiting:
                for identity, worker in workers.items():
                    room = room_for(queue, worker) if room_for is not None else worker.free
                    _require(worker.draining or room <= 0 or not worker.tags.issuperset(queue.tags),
                             "%d tasks requiring %s wait while worker %r has %d free slots", queue.waiting,
                             sorted(queue.tags), identity, room)
    _require(len(live_queue) == tasks.waiting,
             "the queues hold %d live tasks, their count says %d", len(live_queue), tasks.waiting)
    for tags, queue in tasks.queues.items():
        _require(queue.tags == tags, "the queue of tags %s is filed under %s", sorted(queue.tags), sorted(tags))
        _check_queue(queue, clients)
    queued = {record.task_id for record in live_queue}
    _require(len(queued) == len(live_queue), "a task is queued twice")
    for record in live_queue:
        _require(records.get(record.task_id) is record, "queued task %#x has ended", record.task_id)
        _require(record.worker is None and record.waiting_on == 0,
                 "queued task %#x is also with a worker or parked", record.task_id)

    for task_id, record in records.items():
        _require(record.task_id == task_id, "task %#x is filed under %#x", record.task_id, task_id)
        client = record.client
        _require(clients.get(client.identity) is client or peers.awaited_clients.get(client.identity) is client,
                 "task %#x belongs to a client that left", task_id)
        _require(task_id in client.task_ids, "task %#x is missing from its client's tasks", task_id)
        _require(task_id >> TASK_COUNTER_BITS == client.id_prefix, "task %#x lacks its client's prefix", task_id)
        holder = record.worker
        assigned = holder is not None
        if holder is not None:
            _require(workers.get(holder.identity) is holder, "task %#x is on a worker that left", task_id)
            _require(task_id in holder.assigned, "task %#x is missing from its worker's tasks", task_id)
        parked = record.waiting_on > 0
        _require(assigned or not record.started, "task %#x counts as started with no worker", task_id)
        _require(record.suspect or not record.blame_pending, "task %#x has a death to blame but is no suspect", task_id)
        _require(record.crashes < config.max_task_crashes, "task %#x was not failed at the crash limit", task_id)
        _require(assigned + (task_id in queued) + parked == 1,
                 "task %#x is in %d places (with a worker, queued, parked)", task_id,
                 assigned + (task_id in queued) + parked)
        signature = record.signature
        _require(len(record.args) == signature.args_per_task, "task %#x has a wrong number of arguments", task_id)
        for object_id in (signature.function_id, signature.serializer_id):
            _require(not object_id or object_id in stored, "task %#x's function or serializer was freed", task_id)
        for slot in record.object_slots or ():
            _require(bytes(record.args[slot]) in stored, "task %#x's object argument was freed", task_id)

    live_edges: collections.Counter[int] = collections.Counter()
    for dependency_id, edges in graph.dependents.items():
        _require(dependency_id in records, "edges are kept for task %#x, which has ended", dependency_id)
        for dependent, _ in edges:
            if records.get(dependent.task_id) is dependent:
                live_edges[dependent.task_id] += 1
    resend_waits = lineage.waits_on_resends()
    for task_id, record in records.items():
        # rejoin.py: a task re-submitted after a restart waits on the workers' return as on one more input.
        held_back_here = held_back is not None and held_back.get(task_id) is record
        waits = live_edges[task_id] + resend_waits[task_id] + held_back_here
        _require(record.waiting_on == waits,
                 "task %#x waits on %d results, its edges and resends say %d", task_id, record.waiting_on, waits)
    _check_lineage(lineage, tasks, objects)
    _check_client_counts(tasks, clients)

    uses: collections.Counter[bytes] = collections.Counter()
    for record in records.values():
        uses.update(record.result_objects or ())
    _require(objects.in_stores == sum(1 for item in stored.values() if item.holders),
             "the count of stored objects in stores is off")
    for object_id, stored_object in stored.items():
        _require(stored_object.uses == uses[object_id], "object %s counts %d uses, the tasks say %d",
                 object_id.hex(), stored_object.uses, uses[object_id])
        _require(stored_object.owners or stored_object.uses > 0 or object_id in objects.unused_ids(),
                 "object %s has no owner and was not freed", object_id.hex())
        for owner in stored_object.owners:
            _require(owner in clients and object_id in clients[owner].object_ids,
                     "object %s is owned by %r, which does not list it", object_id.hex(), owner)
    for task_id, object_id in objects.kept.objects.items():
        # A task may be unfinished again while its kept result is lost (lineage.py runs it again).
        _require(object_id in stored and stored[object_id].producer == task_id,
                 "the kept result of task %#x is not the object it made", task_id)
    for task_id, kept_failure in objects.kept.failures.items():
        _require(kept_failure.client_identity in clients, "task %#x's failure is kept for a client that left", task_id)
    _require(not (config.protected and should_exit), "a protected scheduler was shut down")
