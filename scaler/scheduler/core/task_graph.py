"""Graph tasks: which unfinished task waits on which other task's result, and in which argument.

A task submitted with references (TaskGroup.refArgIndices and refTaskIds) is parked here until every task
it references has succeeded. Each result is written into the argument that waits for it, and once none
waits any more the task is ready to run. When a task fails, everything waiting on it fails with it
(task_table.py); a task that ends before its dependents leaves no edge behind.

A reference may also name a finished task of the client submitted with keepResults
(kept_results.py): task_intake.py turns it into an object argument naming the kept
result, or fails the new task with the kept failure, so a client need not know whether such a task ended.
"""

from __future__ import annotations

from collections.abc import Sequence

from scaler.protocol import messages as m
from scaler.scheduler.core.kept_results import KeptResults
from scaler.scheduler.core.peer_registry import ClientPeer
from scaler.scheduler.core.task_record import TaskRecord

# A parked task and the argument slot that receives a result.
Edge = tuple[TaskRecord, int]


def references_by_row(group: m.TaskGroup) -> dict[int, list[tuple[int, int]]]:
    """The group's references by task row: row -> [(argument slot within the row, dependency task id)]."""
    width = group.args_per_task
    by_row: dict[int, list[tuple[int, int]]] = {}
    for flat_index, dependency_id in zip(group.ref_arg_indices, group.ref_task_ids):
        row, slot = divmod(flat_index, width)
        by_row.setdefault(row, []).append((slot, dependency_id))
    return by_row


class TaskGraph:
    def __init__(self) -> None:
        # Task id -> the edges waiting for its result; TaskTable.forget takes a task's edges when it ends.
        self.dependents: dict[int, list[Edge]] = {}

    def check_references(
        self, client: ClientPeer, group: m.TaskGroup, records: dict[int, TaskRecord], kept: KeptResults
    ) -> str | None:
        """Why the group's references cannot be followed, or None. A task may depend only on an earlier row
        of its group, on an unfinished task of its own client, or on a finished kept one (PROTOCOL.md §6)."""
        if len(group.ref_arg_indices) != len(group.ref_task_ids):
            return "refArgIndices and refTaskIds differ in length"
        width = max(group.args_per_task, 1)
        row_of = {task_id: row for row, task_id in enumerate(group.task_ids)}
        object_indices = set(group.object_arg_indices)
        for flat_index, dependency_id in zip(group.ref_arg_indices, group.ref_task_ids):
            if flat_index >= len(group.args):
                return f"argument reference {flat_index} points past the {len(group.args)} arguments"
            if flat_index in object_indices:
                # Its object id would be overwritten by the result, which dispatch would then look up as an object.
                return f"argument {flat_index} is both an object argument and a task reference"
            dependency_row = row_of.get(dependency_id)
            if dependency_row is not None:
                if dependency_row >= flat_index // width:
                    return "a task may only depend on tasks sent before it"
                continue
            dependency = records.get(dependency_id)
            if dependency is None and kept and self.is_kept(client, dependency_id, kept):
                continue
            if dependency is None or dependency.client is not client:
                return f"depends on task {dependency_id:#x}, which is unknown, finished, or another client's"
        return None

    @staticmethod
    def is_kept(client: ClientPeer, task_id: int, kept: KeptResults) -> bool:
        """Whether `task_id` is a finished kept task of the client whose outcome is still kept."""
        return task_id in kept.objects and kept.objects[task_id] in client.object_ids or (
            kept.failure_of(client.identity, task_id) is not None
        )

    def park(self, record: TaskRecord, references: list[tuple[int, int]]) -> None:
        """Hold a task until every argument slot that waits on another task has its result."""
        for slot, dependency_id in references:
            self.dependents.setdefault(dependency_id, []).append((record, slot))
        record.waiting_on = len(references)

    @staticmethod
    def feed_object(
        edges: Sequence[Edge], object_id: bytes, records: dict[int, TaskRecord]
    ) -> tuple[list[TaskRecord], int]:
        """A task succeeded with a stored result: the arguments waiting for it become object arguments naming
        it. Returns the tasks now ready, and how many tasks received it."""
        ready = []
        uses = 0
        for dependent, slot in edges:
            if records.get(dependent.task_id) is not dependent:
                continue
            dependent.args[slot] = object_id
            if dependent.object_slots is None:
                dependent.object_slots = [slot]
            else:
                dependent.object_slots.append(slot)
            if dependent.result_objects is None:
                dependent.result_objects = [object_id]
            else:
                dependent.result_objects.append(object_id)
            uses += 1
            dependent.waiting_on -= 1
            if dependent.waiting_on == 0:
                ready.append(dependent)
        return ready, uses

    @staticmethod
    def feed(edges: Sequence[Edge], payload: m.Buffer, records: dict[int, TaskRecord]) -> list[TaskRecord]:
        """A task succeeded with `payload`: fill the arguments waiting for it; returns the tasks now ready."""
        ready = []
        for dependent, slot in edges:
            if records.get(dependent.task_id) is not dependent:
                continue  # it ended meanwhile (canceled, or failed with another dependency)
            dependent.args[slot] = payload
            dependent.waiting_on -= 1
            if dependent.waiting_on == 0:
                ready.append(dependent)
        return ready
