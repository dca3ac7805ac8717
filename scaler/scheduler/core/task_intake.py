"""A client's submitTasks: which groups are accepted, and where each accepted task goes (PROTOCOL.md §6).

Each group is checked as a whole; a group that fails a check is rejected task by task, with the reason,
and the others go on. An accepted task becomes a TaskRecord and is either parked on its dependencies
(task_graph.py) or queued in its client's lane of the ready queue of its tags (ready_queue.py), at the
back of its priority level: nested tasks (nestingDepth > 0) have lanes of their own, served first.
"""

from __future__ import annotations

import collections
import dataclasses

from scaler.protocol import messages as m
from scaler.protocol.layout import slots_by_row
from scaler.protocol.task_signature import TaskSignature
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.object_lifetime.object_table import ObjectTable
from scaler.scheduler.core.peer_registry import ClientPeer
from scaler.scheduler.core.ready_queue import Tags
from scaler.scheduler.core.rejoin import Rejoin
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.tag_waits import TagWaits
from scaler.scheduler.core.task_graph import TaskGraph, references_by_row
from scaler.scheduler.core.task_record import REANNOUNCED, TaskRecord
from scaler.scheduler.core.task_table import TaskTable
from scaler.utility.identifiers import OBJECT_ID_BYTES, TASK_COUNTER_BITS


class TaskIntake:
    def __init__(
        self,
        config: CoreConfig,
        tasks: TaskTable,
        graph: TaskGraph,
        objects: ObjectTable,
        tag_waits: TagWaits,
        counters: collections.Counter[str],
    ) -> None:
        # After a restart (rejoin.py): set by the core once both exist.
        self.rejoin: Rejoin | None = None
        self._tag_waits = tag_waits
        self._max_tasks_waiting = config.max_number_of_tasks_waiting
        self._tasks = tasks
        self._graph = graph
        self._objects = objects
        self._counters = counters

    def accept(self, client: ClientPeer, submission: m.TaskSubmission, router: ResultRouter, now: float) -> None:
        """Take in the groups of a submission whose objects are stored already (object_table.py)."""
        tasks = self._tasks
        records = tasks.records
        # Lost objects are rare: only then does a new task look at its objects before it is queued.
        lineage = tasks.lineage if tasks.lineage is not None and tasks.lineage.lost else None
        limit = self._max_tasks_waiting
        quiet_ids = set(submission.quiet_task_ids)
        # After a restart, tasks submitted again may have a result or a worker already (rejoin.py).
        rejoin = self.rejoin if self.rejoin is not None and self.rejoin.active(now) else None
        # The ready tasks of each accepted group, queued at the end (ready_queue.py: into the client's lane).
        runs: list[tuple[Tags, TaskSignature, int, list[TaskRecord]]] = []
        # New tasks that name a failed kept task: they fail with it once every group is in (task_graph.py).
        doomed: list[tuple[TaskRecord, m.TaskFailure]] = []
        accepted = 0
        for group in submission.groups:
            problem = self._check_group(client, group, rejoin)
            waiting_after = tasks.waiting + accepted + len(group.task_ids)
            if problem is None and limit >= 0 and waiting_after > limit:
                problem = f"scheduler queue is full ({limit} tasks waiting); submit fewer tasks at once"
            if problem is not None:
                self._counters["tasks_rejected"] += len(group.task_ids)
                for task_id in group.task_ids:
                    failure = m.TaskFailure(
                        task_id=task_id, kind=m.FailureKind.REJECTED, type_name="TaskRejectedError", message=problem
                    )
                    router.failure(client, failure)
                    if group.keep_results:
                        self._objects.kept.keep_failure(client.identity, failure)
                continue
            signature = TaskSignature.of_group(group)
            tags = signature.required_tags
            ready: list[TaskRecord] = []
            # One priority per group: the client puts tasks of different priorities in different groups.
            priority: int = group.priority
            if group.wait_for_tags_ms and tags:
                self._tag_waits.add(now + group.wait_for_tags_ms / 1000, tags, group.task_ids)
            accepted += len(group.task_ids)
            width = group.args_per_task
            args = group.args
            refs_by_row = references_by_row(group) if group.ref_task_ids else {}
            objects_by_row = slots_by_row(group.object_arg_indices, group.args_per_task)
            # Sent again by a client that came back to us (peer_registry.hello_again): the task it had here.
            resumed = client.resumed_ids
            for index, task_id in enumerate(group.task_ids):
                if resumed and task_id in resumed:
                    resumed.discard(task_id)  # unfinished here still, or its outcome is on the way to it
                    accepted -= 1
                    self._counters["tasks_submitted"] -= 1  # counted when it first came
                    continue
                record = TaskRecord(
                    task_id=task_id, client=client, signature=signature, args=args[index * width:(index + 1) * width],
                    priority=priority, ready_since=now,
                )
                if quiet_ids and task_id in quiet_ids:
                    record.quiet = True
                if objects_by_row:
                    record.object_slots = objects_by_row.get(index)
                if rejoin is not None and rejoin.claim(record, router):
                    continue
                records[task_id] = record
                client.task_ids.add(task_id)
                row_refs = refs_by_row.get(index)
                if row_refs and self._objects.kept:
                    row_refs, kept_failure = self._resolve_kept(client, record, row_refs)
                    if kept_failure is not None:  # parked, on one input more, until it fails below
                        self._graph.park(record, row_refs)
                        record.waiting_on += 1
                        doomed.append((record, kept_failure))
                        continue
                if row_refs:
                    self._graph.park(record, row_refs)
                elif lineage is not None and lineage.hold_back(record, router):
                    pass  # it names a lost object: it waits for it to come back (or failed)
                elif rejoin is not None and rejoin.hold_back(record, now):
                    pass  # re-submitted after a restart: it waits for the workers to come back (rejoin.py)
                else:
                    ready.append(record)
            runs.append((tags, signature, priority, ready))
            self._objects.claim_for_group(client, signature, group)
            self._counters["tasks_submitted"] += len(group.task_ids)
        for tags, signature, priority, ready in runs:
            tasks.queue_run(tags, client, signature.nesting_depth, priority, ready)
        for record, failure in doomed:
            if records.get(record.task_id) is record:  # else it failed already, with another doomed input
                tasks.fail(record, dataclasses.replace(failure, task_id=record.task_id), router)

    def _resolve_kept(
        self, client: ClientPeer, record: TaskRecord, row_refs: list[tuple[int, int]]
    ) -> tuple[list[tuple[int, int]], m.TaskFailure | None]:
        """The references of a new task to finished kept tasks of its client (PROTOCOL.md §6): a kept result
        becomes an object argument. Returns the references to unfinished tasks, and a kept failure among the
        inputs, which the task shares."""
        records = self._tasks.records
        live = []
        failure = None
        for slot, dependency_id in row_refs:
            if dependency_id in records:
                live.append((slot, dependency_id))
            elif not self._objects.resolve_kept(client, record, slot, dependency_id) and failure is None:
                failure = self._objects.kept.failure_of(client.identity, dependency_id)
        return live, failure

    def _check_group(self, client: ClientPeer, group: m.TaskGroup, rejoin: Rejoin | None) -> str | None:
        """Why the group is rejected, or None."""
        objects = self._objects
        records = self._tasks.records
        if len(group.args) != group.args_per_task * len(group.task_ids):
            return f"group carries {len(group.args)} arguments for {len(group.task_ids)} tasks of {group.args_per_task}"
        if len(group.keywords) > group.args_per_task:
            return "more keyword names than arguments per task"
        if len(group.function_id) != OBJECT_ID_BYTES or group.function_id not in objects:
            return "unknown function object: send its payload with or before the first task that uses it"
        if group.serializer_id and group.serializer_id not in objects:
            return "unknown serializer object"
        if len(set(group.task_ids)) != len(group.task_ids):
            return "a task id appears twice in one group"
        for task_id in group.task_ids:
            if task_id >> TASK_COUNTER_BITS != client.id_prefix:
                return f"task id {task_id:#x} does not carry this client's prefix {client.id_prefix:#x}"
            if task_id in records and (rejoin is None or records[task_id].signature is not REANNOUNCED) and (
                task_id not in client.resumed_ids
            ):
                return f"task id {task_id:#x} is already in use"
        for tag in group.required_tags:
            if not tag:
                return "a required tag is empty"
        for flat_index in group.object_arg_indices:
            if flat_index >= len(group.args) or bytes(group.args[flat_index]) not in objects:
                return "an object argument names an unknown object (was it cleared, or sent by a client that left?)"
        if group.ref_task_ids or group.ref_arg_indices:
            return self._graph.check_references(client, group, records, self._objects.kept)
        return None
