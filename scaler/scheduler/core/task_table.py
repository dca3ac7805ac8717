"""Every unfinished task, where it is, and how it ends.

A task is in exactly one of three places: with a worker (`record.worker`), in the ready queue of its
required tags (ready_queue.py), or parked on its dependencies (task_graph.py). It leaves the table when
it ends, leaving nothing behind: a success (its result goes to its client and into its dependents), a
failure (which every task waiting on it shares), or a cancel. A task a worker gives back unfinished goes
back ahead of its equals (same client, depth and priority) in its queue.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scaler.protocol import messages as m
from scaler.scheduler.core import crash_blame
from scaler.scheduler.core.client_summary import ClientSummary
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer
from scaler.scheduler.core.ready_queue import NO_TAGS, ReadyQueue, Tags
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.task_graph import Edge, TaskGraph
from scaler.scheduler.core.task_record import REANNOUNCED, TaskRecord

# Both are given to the table by the core: it tells them of tasks ending (object_lifetime/), never builds them.
if TYPE_CHECKING:
    from scaler.scheduler.core.object_lifetime.lineage import Lineage
    from scaler.scheduler.core.object_lifetime.object_table import ObjectTable

_NO_EDGES: tuple[Edge, ...] = ()


class TaskTable:
    def __init__(
        self, graph: TaskGraph, max_task_crashes: int, counters: collections.Counter[str],
        objects: ObjectTable,
    ) -> None:
        self.records: dict[int, TaskRecord] = {}
        # Tasks ready to run, one queue per set of required tags (ready_queue.py), in the order dispatch
        # serves them; a queue stays once made (there are few tag sets).
        self.queues: dict[Tags, ReadyQueue] = {NO_TAGS: ReadyQueue(NO_TAGS)}
        # The unfinished tasks in all queues.
        self.waiting = 0
        # The time of the input being handled (the core sets it): when queued tasks became ready.
        self.now = 0.0
        self._graph = graph
        self._dependents = graph.dependents
        self._max_task_crashes = max_task_crashes
        self._counters = counters
        self._objects = objects
        # Lost data (lineage.py): set by the core once both exist.
        self.lineage: Lineage | None = None

    # ------------------------------------------------------------------------------------------ the queues

    def queue_for(self, tags: Tags) -> ReadyQueue:
        queue = self.queues.get(tags)
        if queue is None:
            queue = self.queues[tags] = ReadyQueue(tags)
        return queue

    def queue_group(self, tags: Tags, records: list[TaskRecord], at_front: bool = False) -> None:
        """Tasks that all require `tags`, into their clients' lanes (ready_queue.py): at the back of their
        priority level, or ahead of their equals keeping their own order."""
        if not records:
            return
        queue = self.queue_for(tags)
        now = self.now
        # Runs of one signature (one client and depth) and one priority go in together: a map is one run.
        first = records[0]
        signature = first.signature
        priority = first.priority
        start = 0
        for index, record in enumerate(records):
            record.ready_since = now
            if record.signature is not signature or record.priority != priority:
                run = records[start:index]
                queue.put(run[0].client, signature.nesting_depth, priority, run, at_front)
                signature, priority, start = record.signature, record.priority, index
        run = records[start:] if start else records
        queue.put(run[0].client, signature.nesting_depth, priority, run, at_front)
        self.waiting += len(records)

    def queue_run(self, tags: Tags, client: ClientPeer, depth: int, priority: int, records: list[TaskRecord]) -> None:
        """Newly accepted tasks of one client, depth and priority, whose `ready_since` is set: at the back of
        their level, with no per-task work beyond the deque's."""
        if records:
            self.queue_for(tags).put(client, depth, priority, records, False)
            self.waiting += len(records)

    def queue_at_back(self, records: list[TaskRecord]) -> None:
        for tags, group in self._by_tags(records).items():
            self.queue_group(tags, group)

    def queue_at_front(self, records: list[TaskRecord]) -> None:
        """Ahead of their equals (same client, depth and priority) with the same tags, keeping their order."""
        for tags, group in self._by_tags(records).items():
            self.queue_group(tags, group, at_front=True)

    def unqueue(self, task_ids: set[int]) -> None:
        """These queued tasks wait for something again (lineage.py): out of their queues. Rare: it rebuilds them."""
        for queue in self.queues.values():
            queue.keep_only(lambda record: record.task_id not in task_ids)
        self.waiting = sum(queue.waiting for queue in self.queues.values())

    @staticmethod
    def _by_tags(records: list[TaskRecord]) -> dict[Tags, list[TaskRecord]]:
        grouped: dict[Tags, list[TaskRecord]] = {}
        for record in records:
            tags = record.signature.required_tags
            group = grouped.get(tags)
            if group is None:
                grouped[tags] = [record]
            else:
                group.append(record)
        return grouped

    def take(self, queue: ReadyQueue, count: int) -> list[TaskRecord]:
        """Up to `count` tasks of the queue, whose turn it is, for workers: they count as running from now."""
        records = queue.take(count)
        self.waiting -= len(records)
        return records

    def queue_entries(self) -> int:
        """Entries in all queues, finished ones not yet skipped included (what they cost in memory)."""
        return sum(queue.entries() for queue in self.queues.values())

    def queued_records(self) -> list[TaskRecord]:
        """Every unfinished queued task, queue by queue (for the tests and the invariants)."""
        return [record for queue in self.queues.values() for record in queue.records()]

    def client_summary(self, client: ClientPeer, now: float) -> ClientSummary:
        """The client's tasks for the monitor, from the counters the queues keep and the fronts of its lanes."""
        oldest: float | None = None
        for queue in self.queues.values():
            for (owner, _), lane in queue.lanes.items():
                if owner is client and lane.waiting:
                    ready_since = lane.oldest_ready()
                    if ready_since is not None and (oldest is None or ready_since < oldest):
                        oldest = ready_since
        return ClientSummary(
            queued=client.tasks_queued, running=client.tasks_running,
            oldest_ready_seconds=max(0.0, now - oldest) if oldest is not None else 0.0,
        )

    # ------------------------------------------------------------------------------------------ endings

    def forget(self, record: TaskRecord) -> Sequence[Edge]:
        """The task has ended: no state about it stays behind. Returns the edges of the tasks waiting on it."""
        del self.records[record.task_id]
        record.client.task_ids.discard(record.task_id)
        if record.worker is not None:
            record.worker.assigned.pop(record.task_id, None)
            record.client.tasks_running -= 1
        elif record.waiting_on == 0:
            record.canceled = True  # still in the queue; take() skips it
            self.waiting -= 1
            self.queues[record.signature.required_tags].ended(record)
        if record.result_objects is not None:
            self._objects.end_uses(record.result_objects)
        # The graph's edges dict read directly, not through a method: this runs once for every task.
        return self._dependents.pop(record.task_id, _NO_EDGES)

    def succeed(self, record: TaskRecord, payload: m.Buffer, router: ResultRouter) -> None:
        edges = self.forget(record)
        lineage = self.lineage
        if lineage is not None and lineage.reruns and record.task_id in lineage.reruns:
            lineage.rerun_ended(record, payload=payload)
        if not record.quiet:
            router.success(record.client, record.task_id, payload)
            if record.signature.keep_results:
                self._objects.keep_inline(record.client, record.task_id, payload)
        self._counters["tasks_succeeded"] += 1
        if edges:
            self.queue_at_back(self._graph.feed(edges, payload, self.records))

    def succeed_stored(self, record: TaskRecord, result: m.StoredResult, router: ResultRouter) -> None:
        """The task succeeded and its result is in a store (a checked StoredResult): its client and its
        dependents get the object id."""
        made_by = record.worker.identity if record.worker is not None else b""
        edges = self.forget(record)
        ready: list[TaskRecord] = []
        uses = 0
        if edges:
            ready, uses = self._graph.feed_object(edges, result.object_id, self.records)
        self._objects.add_result(
            record.client, record.task_id, result, uses, for_client=not record.quiet, made_by=made_by
        )
        lineage = self.lineage
        if lineage is not None:
            lineage.remember(result.object_id, record)
            if record.task_id in lineage.reruns:
                lineage.rerun_ended(record, object_id=result.object_id)
        if not record.quiet:
            router.stored(record.client, result)
            if record.signature.keep_results:
                self._objects.kept.objects[record.task_id] = result.object_id
        self._counters["tasks_succeeded"] += 1
        if ready:
            self.queue_at_back(ready)

    def fail(self, record: TaskRecord, failure: m.TaskFailure, router: ResultRouter) -> None:
        """The task ends unsuccessfully, and so does every task waiting on its result, with the same failure."""
        pending = [(record, failure)]
        while pending:
            current, current_failure = pending.pop()
            edges = self.forget(current)
            lineage = self.lineage
            if lineage is not None and lineage.reruns and current.task_id in lineage.reruns:
                lineage.rerun_ended(current, failure=current_failure)
            if not current.quiet:
                router.failure(current.client, current_failure)
                if current.signature.keep_results:
                    self._objects.kept.keep_failure(current.client.identity, current_failure)
            self._counters[f"tasks_{current_failure.kind.name.lower()}"] += 1
            for dependent, _ in edges:
                if self.records.get(dependent.task_id) is dependent:
                    pending.append((dependent, dataclasses.replace(current_failure, task_id=dependent.task_id)))

    def requeue(self, records: list[TaskRecord], router: ResultRouter) -> None:
        """Unfinished tasks a worker no longer holds go back ahead of their equals, keeping their order; one
        whose cancel was pending ends canceled instead."""
        requeued = []
        for record in records:
            if record.signature is REANNOUNCED:
                self.forget(record)  # its content is unknown here (rejoin.py): its client's re-submission runs it
                continue
            if record.cancel_requested:
                # Still linked to its worker, so forget() frees that slot and does not count it as queued.
                self.fail(record, m.TaskFailure(task_id=record.task_id, kind=m.FailureKind.CANCELED), router)
                continue
            if record.worker is not None:
                record.worker.assigned.pop(record.task_id, None)
                record.worker = None
                record.client.tasks_running -= 1
            record.started = False  # crash_blame.py: wherever it runs next, it has not started there
            if self.lineage is not None and self.lineage.hold_back(record, router):
                continue  # an input of it was lost: it waits for it to come back (or failed)
            requeued.append(record)
        self.queue_at_front(requeued)
        self._counters["tasks_rescheduled"] += len(requeued)

    # ------------------------------------------------------------------------------------------ what peers do

    def take_results(self, worker: WorkerPeer, results: m.TaskResults, router: ResultRouter) -> None:
        """A worker's answers. Only answers for tasks it holds count: the rest are late or duplicates (the
        task was canceled, or given to another worker after this one was dropped) and are dropped."""
        records = self.records
        if results.warnings:
            self._route_warnings(worker, results.warnings, router)
        profiles = {profile.task_id: profile for profile in results.profiles} if results.profiles else None
        for task_id, payload in zip(results.succeeded_ids, results.payloads):
            record = records.get(task_id)
            if record is None or record.worker is not worker:
                continue
            self.succeed(record, payload, router)
            if profiles and task_id in profiles and not record.quiet:
                router.profile(record.client, profiles[task_id])
        for result in results.stored:
            record = records.get(result.task_id)
            if record is None or record.worker is not worker:
                continue
            problem = self._objects.check_result(result)
            if problem is None:
                self.succeed_stored(record, result, router)
                if profiles and result.task_id in profiles and not record.quiet:
                    router.profile(record.client, profiles[result.task_id])
            else:
                self.fail(record, m.TaskFailure(
                    task_id=result.task_id, kind=m.FailureKind.SERIALIZATION, type_name="StoredResultError",
                    message=problem,
                ), router)
        # Keyed by task id: a worker naming one task twice in a message must not queue it twice.
        back_to_queue: dict[int, TaskRecord] = {}
        for failure in results.failures:
            record = records.get(failure.task_id)
            if record is None or record.worker is not worker or failure.task_id in back_to_queue:
                continue
            if failure.kind == m.FailureKind.WORKER_DIED and crash_blame.processor_died(
                record, failure, self._max_task_crashes
            ):
                self.fail(record, failure, router)
            elif failure.kind in (m.FailureKind.RETURNED, m.FailureKind.WORKER_DIED):
                back_to_queue[failure.task_id] = record
            else:
                self.fail(record, failure, router)
        if back_to_queue:
            self.requeue(list(back_to_queue.values()), router)

    def _route_warnings(self, worker: WorkerPeer, warnings: list[m.TaskWarning], router: ResultRouter) -> None:
        """Warnings go to the task's client, in the same message as the outcome that comes with them.

        Those of quiet graph tasks too: the client holds them for whoever gets the graph's results (a
        warning deep inside a graph is still news to the caller of get()). Warnings of a task this
        worker no longer holds are dropped with its late result.
        """
        records = self.records
        for warning in warnings:
            record = records.get(warning.task_id)
            if record is not None and record.worker is worker:
                router.warning(record.client, warning)

    def drop_client_tasks(self, client: ClientPeer, force: bool, out: list[Outgoing]) -> int:
        """End every unfinished task of the client without an outcome (it cleared, or it is gone), and tell
        the workers holding them to drop them; `force` stops running ones too. Returns how many ended."""
        per_worker: dict[bytes, list[int]] = {}
        task_ids = list(client.task_ids)
        for task_id in task_ids:
            record = self.records[task_id]
            if record.worker is not None:
                per_worker.setdefault(record.worker.identity, []).append(task_id)
            self.forget(record)
        for queue in self.queues.values():
            queue.drop_client(client)
        out.extend(
            (identity, m.CancelTasks(task_ids=held, force=force)) for identity, held in per_worker.items()
        )
        return len(task_ids)
