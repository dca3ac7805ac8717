"""CallbackThread: where the joblib backend runs joblib's completion callbacks.

A future's done-callbacks run on the client's I/O thread (on another thread only when the future was
done already or the client's link had ended: client/connection.py). joblib's callback does real work: it
reads the next items from the user's iterator and serializes the next batch, arguments and all.
Done there, that would stall every send and receive of the client, heartbeats included, so the
I/O thread only hands the finished future over, and this thread, owned by the backend, calls joblib.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from typing import Callable

from scaler.utility.fork_safety import fix_after_fork

logger = logging.getLogger(__name__)

_Callback = Callable[[concurrent.futures.Future], object]


class CallbackThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[_Callback, concurrent.futures.Future] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        fix_after_fork(self)

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                # A queue per thread, so a thread started after a stop() can never take the old stop mark.
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, args=(self._queue,), name=self._name, daemon=True)
                self._thread.start()

    def post(self, callback: _Callback, future: concurrent.futures.Future) -> None:
        """Run `callback(future)` on this thread; dropped when stopped, since joblib's call is over then."""
        with self._lock:
            if self._thread is not None:
                self._queue.put((callback, future))

    def stop(self, timeout: float) -> None:
        """Run the callbacks already posted, then end the thread (not waiting on itself)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._queue.put(None)
        if thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(f"{self._name}: a joblib callback did not finish within {timeout:g}s")

    def _after_fork_in_child(self) -> None:
        """The thread stayed with the parent: the next start() starts one in this process."""
        self._lock = threading.Lock()
        self._thread = None

    def _run(self, work: queue.SimpleQueue) -> None:
        while True:
            item = work.get()
            if item is None:
                return
            callback, future = item
            try:
                callback(future)
            except Exception:  # joblib records task errors itself; anything else must not kill the thread
                logger.exception(f"{self._name}: a joblib callback failed")
