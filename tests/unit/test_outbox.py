"""The client's outbox batching: what piled up leaves as few messages as it can, in the order it was queued."""

from __future__ import annotations

import collections

from scaler.client.outbox import MAX_TASKS_PER_MESSAGE, OutboxItem, TaskBatch, messages_from
from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature

SQUARE = TaskSignature(function_id=b"s" * 16, args_per_task=1)
ADD = TaskSignature(function_id=b"a" * 16, args_per_task=2)


def drained(*items: OutboxItem, inline_budget: int = 0) -> list[m.Message]:
    outbox: collections.deque[OutboxItem] = collections.deque(items)
    messages = list(messages_from(outbox, inline_budget))
    assert not outbox
    return messages


def batch(signature: TaskSignature, task_ids: list[int], object_positions: list[int] | None = None) -> TaskBatch:
    args = [f"{task_id}.{column}".encode() for task_id in task_ids for column in range(signature.args_per_task)]
    return TaskBatch(signature, task_ids, args, object_positions or [], m.inline_bytes(args))


def test_tasks_of_one_signature_queued_one_by_one_leave_as_one_group() -> None:
    (submission,) = drained(batch(SQUARE, [1]), batch(SQUARE, [2]), batch(SQUARE, [3, 4]))
    assert isinstance(submission, m.TaskSubmission)
    (group,) = submission.groups
    assert group.task_ids == [1, 2, 3, 4]
    assert group.args == [b"1.0", b"2.0", b"3.0", b"4.0"]


def test_a_new_signature_starts_a_new_group_in_the_same_message() -> None:
    (submission,) = drained(batch(SQUARE, [1]), batch(ADD, [2]), batch(SQUARE, [3]))
    assert isinstance(submission, m.TaskSubmission)
    assert [(group.function_id, group.task_ids) for group in submission.groups] == [
        (SQUARE.function_id, [1]), (ADD.function_id, [2]), (SQUARE.function_id, [3])
    ]


def test_object_positions_are_shifted_to_their_place_in_the_group() -> None:
    (submission,) = drained(batch(ADD, [1], [1]), batch(ADD, [2], [0]))
    assert isinstance(submission, m.TaskSubmission)
    assert submission.groups[0].object_arg_indices == [1, 2]


def test_other_messages_keep_their_place_in_the_order() -> None:
    cancel = m.CancelTasks(task_ids=[1])
    messages = drained(batch(SQUARE, [1]), cancel, batch(SQUARE, [2]))
    assert [type(message) for message in messages] == [m.TaskSubmission, m.CancelTasks, m.TaskSubmission]
    assert messages[1] is cancel


def test_an_object_leaves_before_the_tasks_queued_after_it() -> None:
    function = m.ObjectPayload(object_id=b"f" * 16, payload=b"code")
    messages = drained(batch(SQUARE, [1]), function, batch(SQUARE, [2]))
    assert len(messages) == 2
    first, second = messages
    assert isinstance(first, m.TaskSubmission) and isinstance(second, m.TaskSubmission)
    assert (first.objects, [g.task_ids for g in first.groups]) == ([], [[1]])
    assert (second.objects, [g.task_ids for g in second.groups]) == ([function], [[2]])


def test_a_large_map_leaves_in_messages_of_bounded_size() -> None:
    task_ids = list(range(MAX_TASKS_PER_MESSAGE * 2 + 1))
    messages = drained(*(batch(SQUARE, task_ids[start:start + 1000]) for start in range(0, len(task_ids), 1000)))
    submissions = [message for message in messages if isinstance(message, m.TaskSubmission)]
    sizes = [sum(len(group.task_ids) for group in submission.groups) for submission in submissions]
    assert sizes == [MAX_TASKS_PER_MESSAGE, MAX_TASKS_PER_MESSAGE, 1]


def test_the_inline_budget_splits_messages_but_never_a_batch() -> None:
    budget = 10
    messages = drained(batch(SQUARE, [1, 2]), batch(SQUARE, [3, 4]), batch(SQUARE, [5, 6, 7, 8]), inline_budget=budget)
    task_ids = [[g.task_ids for g in message.groups] for message in messages if isinstance(message, m.TaskSubmission)]
    assert task_ids == [[[1, 2]], [[3, 4]], [[5, 6, 7, 8]]]  # each batch is 6 to 12 bytes: over 10 together
