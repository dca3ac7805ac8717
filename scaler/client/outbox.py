"""What callers queue for the scheduler, and how the I/O thread turns what piled up into few messages.

Callers append items to a deque from any thread: tasks (TaskBatch), objects (ObjectPayload) and other
messages. The I/O thread hands them to the connection core, which drains them with `messages_from`: it
packs consecutive tasks and objects into TaskSubmissions, one TaskGroup per run of tasks of one signature,
and keeps every other message in its place in the order. An object always leaves before any task queued
after it, so before the tasks that name it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterator, Sequence, Union

from scaler.client.result_sinks import ResultSink
from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature

# A submission holds this many tasks at most, so that the scheduler starts dispatching a large map early.
MAX_TASKS_PER_MESSAGE = 2000


@dataclasses.dataclass(slots=True)
class TaskBatch:
    """Tasks of one signature, queued together: one submit, or a chunk of a map."""

    signature: TaskSignature
    task_ids: Sequence[int]
    # Row by row, `signature.args_per_task` a task.
    args: list[bytes]
    # Indices into `args` of the arguments that are object ids.
    object_positions: list[int]
    # What `args` add to a control frame (m.inline_bytes).
    inline_bytes: int
    # Where the outcomes go: registered by the connection core when it takes the batch (None: nowhere, tests).
    sink: ResultSink | None = None
    # (index into `args`, task id): that argument is the result of a kept task, resolved on the cluster.
    references: list[tuple[int, int]] | None = None


OutboxItem = Union[TaskBatch, m.ObjectPayload, m.Message]


def messages_from(outbox: collections.deque[OutboxItem], inline_budget: int) -> Iterator[m.Message]:
    """Take every item from `outbox`, oldest first, and yield the messages that carry them.

    `inline_budget` (0: none) bounds the small payloads one message carries inside its control frame;
    a single batch over it still goes alone (the caller splits batches that would exceed it).
    """
    # One pass with local variables: this runs for every task on the I/O thread.
    objects: list[m.ObjectPayload] = []
    groups: list[m.TaskGroup] = []
    current: m.TaskGroup | None = None
    current_signature: TaskSignature | None = None
    count = 0
    inline = 0  # bytes of small payloads so far: kept under the scheduler's control-frame limit
    while outbox:
        item = outbox.popleft()
        if isinstance(item, TaskBatch):
            if inline_budget and inline + item.inline_bytes > inline_budget and (objects or groups):
                yield m.TaskSubmission(objects=objects, groups=groups)
                objects, groups, current, count, inline = [], [], None, 0, 0
            inline += item.inline_bytes
            signature = item.signature
            if current is None or (signature is not current_signature and signature != current_signature):
                current = signature.new_group()
                current_signature = signature
                groups.append(current)
            if item.object_positions:
                base = len(current.args)
                current.object_arg_indices.extend(base + position for position in item.object_positions)
            if item.references:
                base = len(current.args)
                for position, task_id in item.references:
                    current.ref_arg_indices.append(base + position)
                    current.ref_task_ids.append(task_id)
            current.task_ids.extend(item.task_ids)
            current.args.extend(item.args)
            count += len(item.task_ids)
            if count >= MAX_TASKS_PER_MESSAGE:
                yield m.TaskSubmission(objects=objects, groups=groups)
                objects, groups, current, count, inline = [], [], None, 0, 0
        elif isinstance(item, m.ObjectPayload):
            size = m.inline_bytes((item.payload,))
            if groups or (inline_budget and inline + size > inline_budget and objects):
                yield m.TaskSubmission(objects=objects, groups=groups)
                objects, groups, current, count, inline = [], [], None, 0, 0
            inline += size
            objects.append(item)
        else:
            if objects or groups:
                yield m.TaskSubmission(objects=objects, groups=groups)
                objects, groups, current, count, inline = [], [], None, 0, 0
            yield item
    if objects or groups:
        yield m.TaskSubmission(objects=objects, groups=groups)
