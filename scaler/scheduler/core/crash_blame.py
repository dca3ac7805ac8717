"""Crash blame: which task is held responsible when a processor or a whole worker dies, and when to give up.

A processor's death comes with the name of the task it was running: its worker reports that task as
workerDied, and it counts one crash. A worker's death comes with no name: any of the tasks it held may
have been running. None of them is blamed yet; all become *suspects*, which their next worker must
report before running (TaskGroup.reportStart, answered by TaskStarted). A suspect reported started on a
worker that then dies is blamed for that death and for the one that made it a suspect, so a task that
kills every worker it runs on fails with WorkerDiedError after `max_task_crashes` deaths, while the
tasks that merely shared a worker with it are never blamed (docs/failure_model.md).
"""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.task_record import TaskRecord


def processor_died(record: TaskRecord, failure: m.TaskFailure, max_task_crashes: int) -> bool:
    """A task's processor died under it: one crash more. True when that reaches the limit; the failure's
    message then says so, and the task ends with it instead of being retried."""
    record.crashes += 1
    if record.crashes < max_task_crashes:
        return False
    failure.message = f"{failure.message} (processors or workers died under it {record.crashes} times, giving up)"
    return True


def worker_died(
    worker: WorkerPeer, records: list[TaskRecord], max_task_crashes: int
) -> tuple[list[tuple[TaskRecord, m.TaskFailure]], list[TaskRecord]]:
    """The worker holding `records` is gone: (tasks to fail with WorkerDiedError, tasks to run again).

    Only a suspect it had reported started is blamed; every task it held is a suspect afterwards. A task
    whose cancel is pending is not failed here: it comes back and ends as canceled.
    """
    failed: list[tuple[TaskRecord, m.TaskFailure]] = []
    retried: list[TaskRecord] = []
    for record in records:
        if record.started:
            record.crashes += 2 if record.blame_pending else 1
            record.blame_pending = False
            if record.crashes >= max_task_crashes and not record.cancel_requested:
                failed.append((record, m.TaskFailure(
                    task_id=record.task_id, kind=m.FailureKind.WORKER_DIED,
                    type_name="scaler.errors.WorkerDiedError",
                    message=(
                        f"the worker running this task died ({worker.name}); workers or processors died "
                        f"under it {record.crashes} times, giving up (--max-task-crashes {max_task_crashes})"
                    ),
                )))
                continue
        elif not record.suspect:
            record.blame_pending = True
        record.suspect = True
        retried.append(record)
    return failed, retried


def note_started(worker: WorkerPeer, task_ids: list[int], records: dict[int, TaskRecord]) -> list[int]:
    """The worker is about to run these tasks (sent with reportStart): from now on a death of this worker
    is blamed on them. Returns the ones it holds, which it may run; the others are no longer its own (a
    cancel is on its way and drops them there)."""
    noted = []
    for task_id in task_ids:
        record = records.get(task_id)
        if record is not None and record.worker is worker:
            record.started = True
            noted.append(task_id)
    return noted
