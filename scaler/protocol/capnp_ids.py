"""What a hop that only forwards tasks and results reads of them: their ids (the worker's agent, agent_core.py).

A submission or results in one frame, naming no other frames and carrying no objects, is read only as far as
its ids; anything else is decoded in full (capnp_codec.decode) and its ids taken from the message.
"""

from __future__ import annotations

from collections.abc import Sequence

from scaler.protocol.capnp_codec import (
    _FAILURE,
    _GROUP,
    _MESSAGE,
    _OBJECTS,
    _RESULTS,
    _SUBMISSION,
    _filled,
    _list,
    _read,
    decode,
)
from scaler.protocol.message_types import Buffer, Message, ResultIds, SubmissionIds, TaskResults, TaskSubmission


def decode_ids(frames: Sequence[Buffer]) -> Message | SubmissionIds | ResultIds:
    """Like decode, but a submission or results only as far as their ids (m.decode_ids)."""
    ids = _read(frames, _ids_of_root)
    if ids is not None:
        return ids
    message = decode(frames)
    if isinstance(message, TaskSubmission):
        return SubmissionIds([task_id for group in message.groups for task_id in group.task_ids], message.objects)
    if isinstance(message, TaskResults):
        return ResultIds(
            [*message.succeeded_ids, *(failure.task_id for failure in message.failures),
             *(stored.task_id for stored in message.stored)],
            [(stored.task_id, stored.object_id) for stored in message.stored],
        )
    return message


def _ids_of_root(reader, which: str, frames: Sequence[Buffer]) -> SubmissionIds | ResultIds | None:
    """The ids of a submission or results in one frame, naming no other frames and carrying no objects; None
    for anything else, decoded in full instead (so that a frame named but missing is still found out here)."""
    if len(frames) != 1:
        return None
    if which == "submitTasks":
        submission = reader._get_by_field(_MESSAGE[which])
        if submission._has_by_field(_OBJECTS) and len(submission._get_by_field(_OBJECTS)):
            return None
        task_ids = []
        for group in _list(submission._get_by_field(_SUBMISSION["groups"])):
            if _filled(group, _GROUP["argFrames"]):
                return None
            task_ids.extend(_list(group._get_by_field(_GROUP["taskIds"])))
        return SubmissionIds(task_ids, [])
    if which == "taskResults":
        results = reader._get_by_field(_MESSAGE[which])
        get, has = results._get_by_field, results._has_by_field
        if _filled(results, _RESULTS["payloadFrames"]):
            return None
        finished = _list(get(_RESULTS["succeededIds"]))
        if has(_RESULTS["failures"]):
            finished.extend(failure._get_by_field(_FAILURE["taskId"]) for failure in _list(get(_RESULTS["failures"])))
        stored_task_ids = _list(get(_RESULTS["storedTaskIds"])) if has(_RESULTS["storedTaskIds"]) else []
        if not stored_task_ids:
            return ResultIds(finished, [])
        return ResultIds(finished + stored_task_ids, list(zip(stored_task_ids, get(_RESULTS["storedObjectIds"]))))
    return None
