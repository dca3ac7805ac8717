"""Cancelling many futures at once, without waiting for the answers, whatever futures the adapters hold.

`ScalerFuture.cancel()` sends one cancel and waits for its answer. A worker reads cancels only
between tasks, so for a task queued behind a running one the answer comes when the running one
ends. An abandoned `map` iterator, `shutdown(cancel_futures=True)` or a joblib abort must stop
thousands of queued tasks before the workers reach them, so the cancels have to go out together
(`scaler.client.future.cancel_without_waiting`).
"""

from __future__ import annotations

import concurrent.futures
from typing import Iterable

from scaler.client import future as client_future


def cancel_without_waiting(futures: Iterable[concurrent.futures.Future], force: bool = False) -> None:
    """Ask for the tasks of these futures to be cancelled; returns at once.

    Each future settles when the scheduler answers: a queued task's future ends cancelled; a task
    already running finishes, and its future gets its result, as a running call does in a
    ProcessPoolExecutor, unless `force` stops it (its worker replaces the processor running it).
    """
    scaler_futures = []
    for future in futures:
        future = _followed(future)
        if isinstance(future, client_future.ScalerFuture):
            scaler_futures.append(future)
        elif not future.done():
            future.cancel()  # any other future's cancel() does not wait
    client_future.cancel_without_waiting(scaler_futures, force)


def _followed(future: concurrent.futures.Future) -> concurrent.futures.Future:
    """The ScalerFuture behind an executor's future; cancelling it settles both."""
    source = getattr(future, "source", None)
    return source if isinstance(source, concurrent.futures.Future) else future
