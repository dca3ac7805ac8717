"""Cancelling many futures at once, without waiting for the answers.

`ScalerFuture.cancel()` sends one cancel and waits for its answer. A worker reads cancels only
between tasks, so for a task queued behind a running one the answer comes when the running one
ends. An abandoned `map` iterator, `shutdown(cancel_futures=True)` or a joblib abort must stop
thousands of queued tasks before the workers reach them, so the cancels have to go out together.

Stopgap: the Client has no public call for that, so `cancel_without_waiting` sends one CancelTasks
per connection through `ScalerFuture._connection.cancel_tasks`. When the client gains such a call
(say `Client.cancel(futures, wait=False)`), only this function changes.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Iterable

from scaler.client.future import ScalerFuture


def cancel_without_waiting(futures: Iterable[concurrent.futures.Future]) -> None:
    """Ask for the tasks of these futures to be cancelled; returns at once.

    Each future settles when the scheduler answers: a queued task's future ends cancelled; a task
    already running finishes, and its future gets its result, as a running call does in a
    ProcessPoolExecutor.
    """
    task_ids_by_connection: dict[int, tuple[Any, list[int]]] = {}
    for future in futures:
        future = _followed(future)
        if future.done():
            continue
        if isinstance(future, ScalerFuture):
            connection = future._connection
            task_ids_by_connection.setdefault(id(connection), (connection, []))[1].append(future.task_id)
        else:
            future.cancel()  # any other future's cancel() does not wait
    for connection, task_ids in task_ids_by_connection.values():
        connection.cancel_tasks(task_ids)


def _followed(future: concurrent.futures.Future) -> concurrent.futures.Future:
    """The ScalerFuture behind an executor's future; cancelling it settles both."""
    source = getattr(future, "source", None)
    return source if isinstance(source, concurrent.futures.Future) else future
