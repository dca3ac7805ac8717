"""Results that the scheduler would not read as they are: a processor's batch, cut to its size limits.

The scheduler's welcome names the largest frame and the largest control frame it reads (0: no limit;
PROTOCOL.md §10). Over either, ZeroMQ or the scheduler drops the whole message unread, and every task
in it would wait forever. So a result over the frame limit becomes its task's failure
(PayloadTooLargeError; the task is not retried), and the rest go in as many messages as needed, each
task's warnings and profile in the message that carries its outcome.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys

from scaler.errors import PayloadTooLargeError
from scaler.protocol import messages as m


@dataclasses.dataclass(frozen=True)
class SizeLimits:
    """What the scheduler reads, from its welcome: any frame, and the control frame (0: no limit)."""

    max_frame_bytes: int = 0
    max_control_frame_bytes: int = 0

    def admit(self, frames: list[m.Buffer]) -> bool:
        """Whether these frames go as they are: a frame at the frame limit is refused too (PROTOCOL.md §10)."""
        if self.max_control_frame_bytes and len(frames[0]) > self.max_control_frame_bytes:
            return False
        return not self.max_frame_bytes or max(map(len, frames)) < self.max_frame_bytes


def split_results(results: m.TaskResults, limits: SizeLimits) -> tuple[list[m.TaskResults], int]:
    """The batches to send instead of `results`, and how many results failed as too large."""
    frame_limit = limits.max_frame_bytes
    # Half the control frame for what rides inline: the rest of the message (ids, lengths) needs room too.
    budget = limits.max_control_frame_bytes // 2 if limits.max_control_frame_bytes else sys.maxsize
    profiles = {profile.task_id: profile for profile in results.profiles}
    warnings_by_task: dict[int, list[m.TaskWarning]] = {}
    for warning in results.warnings:
        warnings_by_task.setdefault(warning.task_id, []).append(warning)
    failures = list(results.failures)
    successes = []
    for task_id, payload in zip(results.succeeded_ids, results.payloads):
        if frame_limit and len(payload) >= frame_limit:  # at the limit too, as the client refuses arguments
            failures.append(_too_large(task_id, len(payload), frame_limit))
        else:
            successes.append((task_id, payload))
    too_large = len(failures) - len(results.failures)

    batches: list[m.TaskResults] = []
    batch = m.TaskResults(succeeded_ids=[], payloads=[], failures=[])
    inline = 0

    def make_room(size: int) -> None:
        nonlocal batch, inline
        if inline + size > budget and (batch.succeeded_ids or batch.failures or batch.stored):
            batches.append(batch)
            batch, inline = m.TaskResults(succeeded_ids=[], payloads=[], failures=[]), 0
        inline += size

    def warnings_of(task_id: int) -> tuple[list[m.TaskWarning], int]:
        task_warnings = warnings_by_task.pop(task_id, [])
        return task_warnings, sum(len(w.message) + len(w.filename) + len(w.category) for w in task_warnings)

    for task_id, payload in successes:
        task_warnings, warnings_size = warnings_of(task_id)
        make_room(m.inline_bytes((payload,)) + warnings_size)
        batch.succeeded_ids.append(task_id)
        batch.payloads.append(payload)
        batch.warnings.extend(task_warnings)
        if task_id in profiles:
            batch.profiles.append(profiles[task_id])
    for stored in results.stored:  # results in a store: a few dozen bytes each here
        task_warnings, warnings_size = warnings_of(stored.task_id)
        make_room(len(stored.object_id) + len(stored.holder) + 16 + warnings_size)
        batch.stored.append(stored)
        batch.warnings.extend(task_warnings)
        if stored.task_id in profiles:
            batch.profiles.append(profiles[stored.task_id])
    for failure in failures:
        task_warnings, warnings_size = warnings_of(failure.task_id)
        make_room(len(failure.message) + len(failure.traceback) + len(failure.exception) + warnings_size)
        batch.failures.append(failure)
        batch.warnings.extend(task_warnings)
    if batch.succeeded_ids or batch.failures or batch.stored:
        batches.append(batch)
    if batches:  # the running time of them all, with the first part: the scheduler sums what it reads
        batches[0].run_seconds, batches[0].ran_tasks = results.run_seconds, results.ran_tasks
    return batches, too_large


def _too_large(task_id: int, size: int, frame_limit: int) -> m.TaskFailure:
    text = (
        f"the result is {size:,} bytes, {'at' if size == frame_limit else 'over'} the scheduler's limit of "
        f"{frame_limit:,} bytes per frame (--max-message-size-bytes); return less, or store it elsewhere and "
        "return its location"
    )
    return m.TaskFailure(
        task_id=task_id, kind=m.FailureKind.RAISED, type_name="scaler.errors.PayloadTooLargeError",
        message=text, exception=pickle.dumps(PayloadTooLargeError(text), protocol=pickle.HIGHEST_PROTOCOL),
    )
