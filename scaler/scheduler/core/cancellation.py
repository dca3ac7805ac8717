"""Cancels: a client's cancelTasks, and a worker's cancelRefused for tasks that had started.

A task no worker holds ends at once as canceled. A task a worker holds is marked, and the worker is asked
to drop it: it answers with the task given back (which then ends as canceled, task_table.py), or, for a
task already running without `force`, with cancelRefused, and the task runs to its end.
"""

from __future__ import annotations

import collections

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer
from scaler.scheduler.core.result_router import ResultRouter
from scaler.scheduler.core.task_table import TaskTable


def cancel(
    client: ClientPeer,
    request: m.CancelTasks,
    tasks: TaskTable,
    counters: collections.Counter[str],
    out: list[Outgoing],
) -> None:
    """Every id the client names gets one outcome: canceled now, later from its worker, or notFound."""
    records = tasks.records
    router = ResultRouter()
    per_worker: dict[bytes, list[int]] = {}
    # A task this cancel ends early (a dependent of one canceled before it, or an id listed twice) has its
    # outcome already: it must not get a second one, notFound.
    live_before = client.task_ids.intersection(request.task_ids)
    for task_id in request.task_ids:
        record = records.get(task_id)
        if record is None and task_id in live_before:
            continue
        if record is None or record.client is not client:
            router.failure(client, m.TaskFailure(task_id=task_id, kind=m.FailureKind.NOT_FOUND))
            counters["tasks_not_found"] += 1
        elif record.worker is None:
            tasks.fail(record, m.TaskFailure(task_id=task_id, kind=m.FailureKind.CANCELED), router)
        else:
            record.cancel_requested = True
            per_worker.setdefault(record.worker.identity, []).append(task_id)
    router.flush(out)
    out.extend(
        (identity, m.CancelTasks(task_ids=task_ids, force=request.force)) for identity, task_ids in per_worker.items()
    )


def refused(worker: WorkerPeer, refusal: m.CancelRefused, tasks: TaskTable, out: list[Outgoing]) -> None:
    """The worker could not cancel tasks that had started: tell their clients, whose cancel() returns False."""
    per_client: dict[bytes, list[int]] = {}
    for task_id in refusal.task_ids:
        record = tasks.records.get(task_id)
        if record is not None and record.worker is worker:
            record.cancel_requested = False  # it runs to the end; a later requeue must not cancel it
            per_client.setdefault(record.client.identity, []).append(task_id)
    out.extend((identity, m.CancelRefused(task_ids=task_ids)) for identity, task_ids in per_client.items())
