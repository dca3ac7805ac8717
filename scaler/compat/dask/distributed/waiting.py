"""`wait`: block until futures (or a persisted collection's chunks) are done, as dask.distributed's `wait`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, NamedTuple

from scaler.compat.dask.distributed.arguments import futures_in
from scaler.compat.dask.distributed.durations import seconds
from scaler.compat.dask.distributed.future import ERROR, Future
from scaler.utility.blocking import waiting_for_tasks

ALL_COMPLETED = "ALL_COMPLETED"
FIRST_COMPLETED = "FIRST_COMPLETED"
FIRST_EXCEPTION = "FIRST_EXCEPTION"


class DoneAndNotDoneFutures(NamedTuple):
    done: set[Future]
    not_done: set[Future]


def wait(fs: Any, timeout: Any = None, return_when: str = ALL_COMPLETED) -> Any:
    """Wait for the futures in `fs` (a Future, lists/dicts of them, or persisted collections);
    `(done, not_done)`. Raises TimeoutError if `return_when` is not met within `timeout` seconds.
    With an asynchronous client, inside its event loop, an awaitable instead."""
    if return_when not in (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION):
        raise ValueError(f"return_when must be ALL_COMPLETED, FIRST_COMPLETED or FIRST_EXCEPTION, got {return_when!r}")
    if not (timeout is None or isinstance(timeout, (int, float, str))):
        raise TypeError(
            f"wait's timeout must be seconds or a duration such as '10 ms', got {type(timeout).__name__}: to wait "
            "for several futures, pass them as one list, wait([x, y])"
        )
    futures = futures_in(fs)
    timeout = seconds(timeout)
    if any(future.client.asynchronous for future in futures):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return loop.run_in_executor(None, _wait, futures, timeout, return_when)
    return _wait(futures, timeout, return_when)


def _wait(futures: list[Future], timeout: float | None, return_when: str) -> DoneAndNotDoneFutures:
    by_outcome: dict[concurrent.futures.Future, list[Future]] = {}
    for future in futures:
        by_outcome.setdefault(future._state.outcome, []).append(future)
    remaining = [len(by_outcome)]
    lock = threading.Lock()
    met = threading.Event()

    def one_done(outcome: concurrent.futures.Future) -> None:
        with lock:
            remaining[0] -= 1
            left = remaining[0]
        # A failed task settles its outcome like any other (the error is the native future's): look at it.
        if left == 0 or return_when == FIRST_COMPLETED or (
            return_when == FIRST_EXCEPTION and by_outcome[outcome][0].status == ERROR
        ):
            met.set()

    if not by_outcome:
        met.set()
    for outcome in by_outcome:
        outcome.add_done_callback(one_done)
    with waiting_for_tasks():
        if not met.wait(timeout):
            left = sum(1 for outcome in by_outcome if not outcome.done())
            raise TimeoutError(f"wait: {left} of {len(by_outcome)} futures not done within {timeout}s")
    done = {future for outcome, same in by_outcome.items() if outcome.done() for future in same}
    return DoneAndNotDoneFutures(done, {future for future in futures if future not in done})
