"""Tasks whose wait for a worker with their tags ran out (TaskGroup.waitForTagsMs): those no worker holds fail
with NoCapableWorkerError, naming the tags missing and what the connected workers have, if no connected worker
has the tags by then; otherwise they wait their turn like any other task."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.placement import Placement
from scaler.scheduler.core.ready_queue import Tags, describe_tags
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.tag_waits import TagWaits
from scaler.scheduler.core.task_table import TaskTable

# The typeName of such a task's failure.
NO_CAPABLE_WORKER = "NoCapableWorkerError"


def fail_tasks_without_capable_worker(
    tag_waits: TagWaits, placement: Placement, tasks: TaskTable, workers: Iterable[WorkerPeer], now: float,
    out: list[Outgoing],
) -> None:
    router = ResultRouter()
    records = tasks.records
    for tags, task_ids in tag_waits.due(now):
        if placement.capable(tags):
            continue
        failure = m.TaskFailure(
            task_id=0, kind=m.FailureKind.REJECTED, type_name=NO_CAPABLE_WORKER,
            message=_no_capable_worker_message(tags, list(workers)),
        )
        for task_id in task_ids:
            record = records.get(task_id)
            if record is not None and record.worker is None:
                tasks.fail(record, dataclasses.replace(failure, task_id=task_id), router)
    router.flush(out)


def _no_capable_worker_message(tags: Tags, workers: list[WorkerPeer]) -> str:
    connected = sorted({describe_tags(worker.tags) for worker in workers})
    missing = frozenset(tags).difference(*(worker.tags for worker in workers))
    absent = f" (none has {describe_tags(missing)})" if missing else ""
    return (
        f"no connected worker has all the tags {describe_tags(tags)} this task requires{absent};"
        f" connected workers have {', '.join(connected) if connected else 'nothing: no worker is connected'}."
        " Start a worker with these tags (scaler_cluster --tags), or require fewer."
    )
