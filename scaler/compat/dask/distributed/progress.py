"""`progress`: a tqdm bar over futures (or persisted collections' chunks) until they are all done.

Unlike dask's, it blocks until the futures are done in a notebook too (there is no widget updated in the
background); with an asynchronous client, inside its loop, it is an awaitable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import IO, Any

from scaler.client.progress import wait_with_progress
from scaler.compat.dask.distributed.arguments import futures_in
from scaler.utility.blocking import waiting_for_tasks


def progress(*futures: Any, notebook: Any = None, multi: bool = True, complete: bool = True,
             group_by: Any = "prefix", file: IO[str] | None = None, **kwargs: Any) -> Any:
    """Show how many of the futures in `futures` (Futures, lists/dicts of them, persisted collections)
    are done, until all are; failures count as done, and are raised by `result()`, not here."""
    found = futures_in(list(futures))
    outcomes = list({id(future._state.outcome): future._state.outcome for future in found}.values())
    if any(future.client.asynchronous for future in found):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return loop.run_in_executor(None, _show, outcomes, file)
    _show(outcomes, file)
    return None


def _show(outcomes: list[concurrent.futures.Future], file: IO[str] | None) -> None:
    finished = threading.Event()
    count = [0]
    lock = threading.Lock()

    def one_done(_: concurrent.futures.Future) -> None:
        with lock:
            count[0] += 1
            if count[0] == len(outcomes):
                finished.set()

    if not outcomes:
        finished.set()
    for outcome in outcomes:
        outcome.add_done_callback(one_done)
    with waiting_for_tasks():
        wait_with_progress(finished, len(outcomes), lambda: count[0], "progress", file)
