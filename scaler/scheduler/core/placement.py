"""Placement: which worker gets which ready task, what it is sent with them, and moving tasks off busy workers.

Dispatch fills the least loaded workers first ("water filling"), so that every worker ends as close as
its capacity allows to one common number of assigned tasks: tasks trickling in one at a time still go
to idle workers, and tasks handed back by a busy worker do not go straight back to it. Each worker gets
one submitTasks per round and tag set, with the objects those tasks need that it does not have yet.
Each tag set's ready queue goes only to the workers whose tags include the set (ready_queue.py).
Balancing asks a worker that holds far more than its alike peers to hand back the tasks it has not started.
The tasks of a client holding far less than its fair fraction of the tasks on workers go to a worker that holds
others' tasks marked to run ahead of them (TaskGroup.ahead, `_newcomers`): deep queues of no-op tasks are what
make them fly, and a newcomer's task would otherwise wait behind a thousand of another client's on the worker
its fair turn sent it to.

At hundreds of workers the cost per task is the cost per message, so two things keep messages few: a
worker that already holds tasks is topped up only with a batch at least as large as what it holds (up to
TOP_UP_BATCH; served_count), an idle worker is given a batch of a function's tasks once they are known to be
tiny (function_pace.py), and a queue whose capable workers were all full is looked at again only for
the worker whose results freed slots (dispatch_freed), not by a scan of every full worker.

Placement follows data: a task whose arguments include stored objects goes, among the workers with
free slots, to one whose store holds the most bytes of them (the least loaded of those), unless that
worker is already loaded well above the least loaded one (`_LOCALITY_SLACK`): locality is a preference,
and balancing still spreads work when the data sits on one host. Among the workers of one store, the one
that made an input counts its bytes twice: its processor still has the value. The rest are water-filled
as before.
"""

from __future__ import annotations

import collections
import math

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.function_pace import FunctionPace
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer
from scaler.scheduler.core.prefetch import Prefetch
from scaler.scheduler.core.ready_queue import ReadyQueue, Tags
from scaler.scheduler.core.task_record import TaskRecord
from scaler.scheduler.core.task_table import TaskTable

# See served_count: the most a worker's top-up needs to carry to be worth a message.
TOP_UP_BATCH = 64
_NO_CLIENTS: frozenset[ClientPeer] = frozenset()


def water_fill(loads: list[int], room: list[int], count: int) -> list[int]:
    """How many of `count` tasks each worker gets, loads ascending, so that loads end up as even as possible."""
    if len(loads) == 1:  # one worker (a round trip's task, or the only one with room): all it can take
        return [min(room[0], count)]
    shares = [0] * len(loads)
    remaining = count
    while remaining > 0:
        open_slots = [i for i in range(len(loads)) if room[i] > shares[i]]
        if not open_slots:
            break
        # The level all open workers would reach if the remaining tasks were spread perfectly.
        total = sum(loads[i] + shares[i] for i in open_slots) + remaining
        level = total // len(open_slots)
        given = 0
        for i in open_slots:
            grant = min(room[i] - shares[i], max(0, level - loads[i] - shares[i]), remaining - given)
            shares[i] += grant
            given += grant
        if given == 0:  # everyone is at the level: the rest go one by one to the least loaded
            for i in sorted(open_slots, key=lambda j: loads[j] + shares[j]):
                if given == remaining:
                    break
                shares[i] += 1
                given += 1
        remaining -= given
    return shares


def served_count(loads: list[int], room: list[int], count: int, batch: int = 1) -> int:
    """How many of the least loaded workers (loads ascending) share `count` tasks: as many as can each be given at
    least as many tasks as it already holds, up to `TOP_UP_BATCH`, or `batch` if more (function_pace.py: tasks
    known to be tiny), within its room (an idle worker: one or more, or `batch`).

    A worker holding tasks will not run the next ones before those; topping it up with fewer costs a message
    (here and back) for every few tasks, which at hundreds of workers is most of the scheduler's work.
    Loads still end within about twice of each other, and every task still goes out (to fewer workers).
    """
    total = 0
    for index, load in enumerate(loads):
        total += load
        level = (total + count) / (index + 1)
        if index and level - load < max(1, min(max(min(load, TOP_UP_BATCH), batch), room[index])):
            return index
    return len(loads)


def holding_count(room: list[int], count: int) -> int:
    """How many of the first workers it takes for their room to hold `count` tasks (all of them if none do)."""
    total = 0
    for index, free in enumerate(room):
        total += free
        if total >= count:
            return index + 1
    return len(room)


def _assigned_count(worker: WorkerPeer) -> int:
    return len(worker.assigned)


def _newcomers(queue: ReadyQueue) -> frozenset[ClientPeer]:
    """The clients of the queue that hold less than half their fair fraction of the tasks on workers: their tasks
    go ahead of what a worker holds already (TaskGroup.ahead), so that they do not wait behind deep queues of
    others' tasks (no-op tasks keep 1,000 on each worker, prefetch.py). Where it is fair: the ready queue gives
    such a client its turns (ready_queue.py), and it goes ahead only until it holds half of what its share is of
    the tasks out there. A client alone, or among clients at their share, never goes ahead: no reordering then."""
    lanes = queue.lanes
    if len(lanes) < 2:  # one client (at one depth): no one to go ahead of
        return _NO_CLIENTS
    running = 0
    shares = 0.0
    for client in {client for client, _ in lanes}:
        if client.tasks_running or client.tasks_queued:
            running += client.tasks_running
            shares += client.share
    if running == 0:
        return _NO_CLIENTS
    # Below half of running * share / shares, without dividing.
    return frozenset(
        turn[3].client for turn in queue.turns
        if 2.0 * turn[3].client.tasks_running * shares < running * turn[3].client.share
    )


def _locality_allows(load: int, least_load: int) -> bool:
    """Whether a worker holding a task's data may take it, though `least_load` is the lightest load around:
    up to twice the lightest load, plus one, so that data on one host still spreads over all workers."""
    return load <= 2 * least_load + 1


class Placement:
    def __init__(
        self,
        config: CoreConfig,
        tasks: TaskTable,
        objects: ObjectTable,
        workers: dict[bytes, WorkerPeer],
        counters: collections.Counter[str],
        prefetch: Prefetch,
    ) -> None:
        self._config = config
        self._prefetch = prefetch
        self._tasks = tasks
        self._objects = objects
        self._workers = workers
        self._counters = counters
        # How long each function's tasks run: idle workers get batches of tiny ones.
        self.pace = FunctionPace()
        self._next_balance = 0.0
        # Per worker tag set (balance() looks at each set of alike workers on its own).
        self._imbalanced_checks: dict[frozenset[str], int] = {}
        # The workers whose tags include each required tag set, worked out when first needed after a
        # worker joined or left: dispatch then scans the same list it would scan without tags.
        self._capable_by_tags: dict[Tags, list[WorkerPeer]] = {}
        # The queues that still held tasks when dispatch last found every capable worker full: until slots
        # free somewhere (dispatch) or on one worker (dispatch_freed), nothing can go out of them.
        self._saturated: set[Tags] = set()

    def workers_changed(self) -> None:
        """A worker joined or left."""
        self._capable_by_tags.clear()
        self._saturated.clear()

    def capable(self, tags: Tags) -> list[WorkerPeer]:
        """The connected workers that may run tasks requiring `tags`."""
        capable = self._capable_by_tags.get(tags)
        if capable is None:
            capable = self._capable_by_tags[tags] = [w for w in self._workers.values() if w.tags.issuperset(tags)]
        return capable

    def dispatch(self, out: list[Outgoing]) -> None:
        """Hand ready tasks to workers with free slots, least loaded first, each queue to its capable workers;
        never to a draining worker, so with every capable worker draining the tasks wait until one joins.
        The makers of the results these tasks read elsewhere are asked to write them into their stores.

        This looks at every capable worker: for any event that may have freed slots anywhere (and on every
        tick, which also catches slots freed unnoticed). The two below are for the frequent events."""
        self._saturated.clear()
        self._dispatch(out, None)
        self._objects.send_publish_requests(out)

    def dispatch_new_tasks(self, out: list[Outgoing]) -> None:
        """Tasks became ready and no slot was freed: a queue whose capable workers were all full stays put."""
        self._dispatch(out, None)
        self._objects.send_publish_requests(out)

    def dispatch_freed(self, worker: WorkerPeer, out: list[Outgoing]) -> None:
        """Only `worker` freed slots (its results): a queue whose capable workers were all full goes to it alone,
        instead of a scan of hundreds of full workers for every results message."""
        self._dispatch(out, worker)
        self._objects.send_publish_requests(out)

    def _dispatch(self, out: list[Outgoing], freed: WorkerPeer | None) -> None:
        tasks = self._tasks
        if tasks.waiting == 0:
            # Nothing waits (a cancel may have emptied the queues): no queue is held back by full workers, and
            # the next tasks must find the slots freed meanwhile.
            self._saturated.clear()
            return
        queues = tasks.queues
        if len(queues) == 1:
            for queue in queues.values():
                self._dispatch_queue(queue, out, freed)
            return
        served = []
        for queue in queues.values():
            if queue.waiting:
                served.append(queue)
            else:
                self._saturated.discard(queue.tags)
        for queue in served:
            self._dispatch_queue(queue, out, freed)
        if len(served) > 1:
            # Queues sharing workers take turns at being served first, so that none starves the others.
            first = served[0].tags
            queues[first] = queues.pop(first)

    def _dispatch_queue(self, queue: ReadyQueue, out: list[Outgoing], freed: WorkerPeer | None) -> None:
        tasks = self._tasks
        if queue.tags in self._saturated:
            # Every capable worker was full when this queue last stopped: only `freed` can have room since.
            if freed is None or not freed.tags.issuperset(queue.tags):
                return
            candidates = [freed]
        else:
            candidates = self.capable(queue.tags)
        newcomers = _newcomers(queue)
        while queue.waiting > 0:
            available = sorted((w for w in candidates if w.free > 0 and not w.draining), key=_assigned_count)
            room = [w.free for w in available]
            if available and not self._prefetch.unlimited:
                available, room = self._room_for_next(queue, available, room)
            if not available:
                self._saturated.add(queue.tags)
                return
            handed = 0
            if self._objects.in_stores:
                # Data decides among all of them (_follow_data); the count is what they can take.
                shares = water_fill([len(w.assigned) for w in available], room, queue.waiting)
                records = tasks.take(queue, sum(shares))
                for worker, batch in self._follow_data(available, room, records):
                    handed += len(batch)
                    out.append((worker.identity, self._submission_for(worker, batch, newcomers)))
            else:
                loads = [len(w.assigned) for w in available]
                served = served_count(loads, room, queue.waiting)
                # One take for the round, so that the clients' turns (ready_queue.py) are shared over all of it:
                # as many as the water filling of the served workers places.
                records = tasks.take(queue, min(queue.waiting, sum(room[:served])))
                if served > 1 and loads[0] == 0:
                    least = self.pace.batch(records)
                    if least > 1:  # tiny tasks: fewer workers, larger messages (function_pace.py)
                        served = min(served, self._batched_count(loads, room, len(records), least))
                shares = water_fill(loads[:served], room[:served], len(records))
                start = 0
                for worker, share in zip(available, shares):
                    if share and start < len(records):
                        batch = records[start:start + share]
                        start += share
                        handed += len(batch)
                        out.append((worker.identity, self._submission_for(worker, batch, newcomers)))
            if handed == 0:
                return
        self._saturated.discard(queue.tags)

    def room(self, queue: ReadyQueue, worker: WorkerPeer) -> int:
        """How many of the queue's next tasks `worker` may take now, as dispatch counts them (for the invariants)."""
        if self._prefetch.unlimited:
            return worker.free
        depth = self._prefetch.for_function(worker, self.pace.slowest_ahead(queue))
        return min(worker.free, depth - len(worker.assigned))

    def _room_for_next(
        self, queue: ReadyQueue, available: list[WorkerPeer], room: list[int]
    ) -> tuple[list[WorkerPeer], list[int]]:
        """The workers that may take more of what the queue gives next, and how many each: within its depth for
        the pace of those tasks' functions (function_pace.py), not only for the pace of what it ran before."""
        seconds = self.pace.slowest_ahead(queue)
        largest = self._config.per_worker_queue_size  # no worker's capacity is above it, when it is set
        if seconds is not None and largest > 0 and seconds * largest <= self._prefetch.horizon:
            return available, room  # tiny tasks: every worker may hold its capacity (no walk of 500 workers)
        for_function = self._prefetch.for_function
        kept: list[WorkerPeer] = []
        kept_room: list[int] = []
        for worker, free in zip(available, room):
            free = min(free, for_function(worker, seconds) - len(worker.assigned))
            if free > 0:
                kept.append(worker)
                kept_room.append(free)
        return kept, kept_room

    @staticmethod
    def _batched_count(loads: list[int], room: list[int], count: int, least: int) -> int:
        """How many of the first workers share `count` tiny tasks given at least `least` each: only idle ones
        (a batch queued behind a running slow task would wait for it), as few as hold them; all of them (water
        filling) when the idle workers cannot hold them all."""
        idle = 0
        while idle < len(loads) and loads[idle] == 0:
            idle += 1
        fewer = served_count(loads[:idle], room[:idle], count, least)
        needed = max(fewer, holding_count(room[:idle], count))
        return needed if sum(room[:needed]) >= count else len(loads)

    def waiting_for_tags(self) -> dict[Tags, int]:
        """Queued tasks that no connected worker may run, by their required tags (for the monitor)."""
        return {
            queue.tags: queue.waiting for queue in self._tasks.queues.values()
            if queue.waiting and not self.capable(queue.tags)
        }

    def _follow_data(
        self, available: list[WorkerPeer], free: list[int], records: list[TaskRecord]
    ) -> list[tuple[WorkerPeer, list]]:
        """Spread `records` (no more than the `free` slots of `available`) over the workers: each task with
        stored inputs to a worker whose store holds most of their bytes when locality allows, else to the
        least loaded worker; the tasks without stored inputs water-filled after them."""
        batches: dict[int, list[TaskRecord]] = {index: [] for index in range(len(available))}
        room = list(free)
        loads = [len(worker.assigned) for worker in available]
        by_store: dict[str, list[int]] = {}
        for index, worker in enumerate(available):
            if worker.store_address:
                by_store.setdefault(worker.store_address, []).append(index)
        rest: list[TaskRecord] = []
        objects = self._objects
        for record in records:
            held, made = objects.bytes_held(
                bytes(record.args[slot]) for slot in record.object_slots
            ) if record.object_slots and by_store else ({}, {})
            if not held:
                rest.append(record)
                continue
            open_slots = [index for index in range(len(available)) if room[index] > 0]
            lightest = min(open_slots, key=loads.__getitem__)
            chosen, best_bytes = lightest, 0
            for store, count in held.items():
                for index in by_store.get(store, ()):
                    if room[index] <= 0 or not _locality_allows(loads[index], loads[lightest]):
                        continue
                    # Its store's bytes, and again those its processor made: among the workers of one host,
                    # the one that made an input reads it without even asking the store.
                    score = count + made.get(available[index].identity, 0)
                    if score > best_bytes or (score == best_bytes and loads[index] < loads[chosen]):
                        chosen, best_bytes = index, score
            batches[chosen].append(record)
            room[chosen] -= 1
            loads[chosen] += 1
        if rest:
            order = sorted((index for index in range(len(available)) if room[index] > 0), key=loads.__getitem__)
            shares = water_fill([loads[index] for index in order], [room[index] for index in order], len(rest))
            start = 0
            for index, share in zip(order, shares):
                batches[index].extend(rest[start:start + share])
                start += share
        return [(available[index], batch) for index, batch in batches.items() if batch]

    def _submission_for(
        self, worker: WorkerPeer, records: list[TaskRecord], newcomers: frozenset[ClientPeer] = _NO_CLIENTS
    ) -> m.TaskSubmission:
        """Assign the tasks to the worker, in groups by signature, suspects apart (crash_blame.py), and a newcomer's
        tasks apart, sent ahead of what the worker holds already (`_newcomers`)."""
        objects = self._objects
        groups: dict[object, m.TaskGroup] = {}
        shipped: list[m.ObjectPayload] = []
        # Only on a worker that holds tasks: there is nothing to go ahead of on an idle one.
        ahead_of = newcomers if newcomers and worker.assigned else None
        for record in records:
            record.worker = worker
            worker.assigned[record.task_id] = None
            signature = record.signature
            ahead = ahead_of is not None and record.client in ahead_of
            key = (signature, record.suspect, ahead) if record.suspect or ahead else signature
            group = groups.get(key)
            if group is None:
                group = groups[key] = signature.new_group(report_start=record.suspect)
                group.ahead = ahead
                for object_id in (signature.serializer_id, signature.function_id):
                    if object_id:
                        objects.ship(worker, object_id, shipped)
            group.task_ids.append(record.task_id)
            if record.object_slots:
                base = len(group.args)
                for slot in record.object_slots:
                    objects.ship(worker, bytes(record.args[slot]), shipped)
                    group.object_arg_indices.append(base + slot)
            group.args.extend(record.args)
        worker.tasks_sent += len(records)
        return m.TaskSubmission(objects=shipped, groups=list(groups.values()))

    def balance(self, now: float, out: list[Outgoing]) -> None:
        """Every `load_balance_seconds`: ask overloaded workers to give back queued tasks when others run dry.

        Workers are balanced only against workers with the same tags, which can run every task they hold:
        a task given back is dispatched again, and dispatch sends it only to a worker with its tags.
        """
        config = self._config
        if config.load_balance_seconds <= 0 or now < self._next_balance:
            return
        self._next_balance = now + config.load_balance_seconds
        # A draining worker is neither a target nor a source: its queue was taken back when it began to drain.
        alike: dict[frozenset[str], list[WorkerPeer]] = {}
        for worker in self._workers.values():
            if not worker.draining:
                alike.setdefault(worker.tags, []).append(worker)
        for tags in list(self._imbalanced_checks):
            if tags not in alike:
                del self._imbalanced_checks[tags]
        for tags, workers in alike.items():
            self._balance_alike(tags, workers, out)

    def _balance_alike(self, tags: frozenset[str], workers: list[WorkerPeer], out: list[Outgoing]) -> None:
        """Only when nothing these workers could run waits in the scheduler (else dispatch already feeds the
        idle) and the imbalance was seen `load_balance_trigger_times` checks in a row. A worker above the
        mean load releases its newest tasks down to the mean; the ones it has not started come back and are
        dispatched anew."""
        config = self._config
        runnable_waiting = any(queue.waiting and tags.issuperset(queue.tags) for queue in self._tasks.queues.values())
        if runnable_waiting or len(workers) < 2:
            self._imbalanced_checks[tags] = 0
            return
        loads = [len(worker.assigned) for worker in workers]
        mean = sum(loads) / len(workers)
        if min(loads) > mean / 2 or max(loads) < 2:
            self._imbalanced_checks[tags] = 0
            return
        checks = self._imbalanced_checks[tags] = self._imbalanced_checks.get(tags, 0) + 1
        if checks < config.load_balance_trigger_times:
            return
        self._imbalanced_checks[tags] = 0
        # Down to the mean rounded up, and not one above it: a worker running one task with one more
        # queued, next to an idle worker, would otherwise keep that task until the running one ends.
        target = math.ceil(mean)
        for worker, load in zip(workers, loads):
            if load > target:
                newest = list(worker.assigned)[target - load:]
                out.append((worker.identity, m.ReleaseTasks(task_ids=newest)))
                self._counters["balance_requests"] += 1
