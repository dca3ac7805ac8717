"""BackgroundCanceller: cancels many futures without making the caller wait.

`ScalerFuture.cancel()` waits for the scheduler's word, one round trip per future, and for a task
that is already running it waits until that task ends. An abandoned `map` iterator, a joblib abort
or `shutdown(wait=False, cancel_futures=True)` must return at once, so they hand their futures to a
canceller, whose few threads do the waiting. Its owner closes it, which joins those threads.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from typing import Iterable

logger = logging.getLogger(__name__)

# Enough parallel round trips that a few futures stuck on running tasks do not hold up the queued
# ones, few enough to stay cheap.
_THREADS = 8


class BackgroundCanceller:
    def __init__(self, name: str, threads: int = _THREADS) -> None:
        self._name = name
        self._max_threads = threads
        self._queue: queue.SimpleQueue[concurrent.futures.Future | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def cancel(self, futures: Iterable[concurrent.futures.Future]) -> None:
        """Cancel every future that is not done yet; returns before the cancels are confirmed.

        Futures submitted last go first: those are the ones most likely still queued, so they are
        stopped before a worker reaches them; the first ones are most likely already running.
        """
        pending = [future for future in futures if not future.done()]
        if not pending:
            return
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            while len(self._threads) < min(self._max_threads, len(pending)):
                thread = threading.Thread(target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
            for future in reversed(pending):
                self._queue.put(future)

    def close(self, timeout: float | None = None) -> bool:
        """Finish the cancels already asked for, then stop the threads; True if they all stopped in time.

        The threads are daemons, so one still waiting on a running task at interpreter exit does not
        keep the process alive.
        """
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(timeout)
        return not any(thread.is_alive() for thread in threads if thread is not current)

    def _run(self) -> None:
        while True:
            future = self._queue.get()
            if future is None:
                return
            try:
                future.cancel()
            except Exception:  # a cancel that fails leaves the task to run; never kill the thread
                logger.exception(f"{self._name}: could not cancel a future")
