"""Fetching the results the scheduler says are kept in stores, on a thread of their own.

A result kept in a store comes to the client as its id, size and holder (PROTOCOL.md §13); the client
fetches it from the holder (mapped when the holder is on this host) before its future completes. A fetch
can wait long: for a large object on a slow link, or for a holder that is gone or stopped. On the I/O
thread, that wait would hold up every other result, heartbeat and submission of the client; here it
holds up only the stored results queued behind it.

The fetch thread only fetches: what it got goes back to the I/O thread (`fetched`), which hands it to
the futures as it does every other result, so futures still complete on the I/O thread only, once each.
It never reads the client's pending outcomes (the I/O thread owns them): the I/O thread hands it only the
results of tasks still waiting, and drops what it fetched for a task canceled meanwhile.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
from typing import Callable

from scaler.errors import ObjectLostError
from scaler.protocol import messages as m
from scaler.protocol.stored_payload import StoredBuffer
from scaler.store.peer_stores import Stores
from scaler.store.store_client import ObjectMissing, StoreError, StoreTimeout

logger = logging.getLogger(__name__)

# How long fetching a stored result may take before its holder counts as gone (objectsLost): a base, plus its
# size at a pace far below any working link (bounded by the client's timeout).
FETCH_WAIT_BASE_SECONDS = 10.0
FETCH_WAIT_BYTES_PER_SECOND = 20e6
# How often an idle fetch thread looks whether it is asked to stop.
_IDLE_SECONDS = 0.5


@dataclasses.dataclass(slots=True)
class FetchedResults:
    """What the fetch thread made of one message's stored results, for the I/O thread to deliver."""

    results: m.TaskResults  # the fetched payloads as successes
    failures: list[tuple[int, BaseException]]  # tasks whose result cannot be had (no rerun will come)


class StoredResultFetcher:
    """One fetch thread per client, started by the first stored result and stopped with the I/O thread."""

    def __init__(
        self, stores: Stores, timeout_seconds: float, send: Callable[[m.Message], None], wake: Callable[[], None],
    ) -> None:
        self._stores = stores
        self._timeout_seconds = timeout_seconds
        self._send = send  # any thread: queue a message for the scheduler
        self._wake = wake  # any thread: make the I/O thread look at `fetched`
        self._requests: queue.SimpleQueue[list[m.StoredResult]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Stores that did not answer a fetch: not waited for again until the directory changes. Those the
        # directory no longer lists are gone already.
        self._silent_holders: set[str] = set()
        # Fetched results, in the order their messages came, for the I/O thread.
        self.fetched: collections.deque[FetchedResults] = collections.deque()

    # ------------------------------------------------------------------------------------------ I/O thread

    def fetch(self, stored: list[m.StoredResult]) -> None:
        """Queue the stored results of one message; what is fetched comes back in `fetched`."""
        if self._stopping.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="scaler-client-fetch", daemon=True)
            self._thread.start()
        self._requests.put(stored)

    def directory_changed(self) -> None:
        """A new directory of stores: those that were silent may answer again (or are no longer listed)."""
        self._silent_holders = set()

    def stop(self, timeout: float) -> bool:
        """Stop the thread after the fetch under way (queued ones are dropped); whether it ended in `timeout`."""
        self._stopping.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ------------------------------------------------------------------------------------------ fetch thread

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                stored = self._requests.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                continue
            try:
                fetched = self._fetch(stored)
            except Exception as error:  # a bug here must fail the futures, not strand them
                logger.exception("Client: fetching stored results failed")
                fetched = FetchedResults(m.TaskResults([], [], []), [
                    (result.task_id, ObjectLostError(f"the result of task {result.task_id:#x} could not be "
                                                     f"fetched: {error!r}"))
                    for result in stored
                ])
            if fetched.results.succeeded_ids or fetched.failures:
                self.fetched.append(fetched)
                self._wake()

    def _fetch(self, stored_results: list[m.StoredResult]) -> FetchedResults:
        """Results kept in stores, fetched from their holders; then the scheduler may let them go.

        A result whose holders do not give it is reported lost and not let go of: the scheduler runs its task
        again and sends the new result, which its future waits for (or the failure if it cannot be made).
        The wait for a holder grows with the object's size, so a slow link is not taken for a dead holder."""
        fetched = FetchedResults(m.TaskResults([], [], []), [])
        released = []
        lost = []
        silent = self._silent_holders
        for stored in stored_results:
            if self._stopping.is_set():
                released.append(stored.object_id)
                continue  # the client is closing
            wait = min(self._timeout_seconds, FETCH_WAIT_BASE_SECONDS + stored.size / FETCH_WAIT_BYTES_PER_SECOND)
            try:
                if stored.holder in silent or self._stores.address_of(stored.holder) is None:
                    raise StoreTimeout(f"the store at {stored.holder} is gone")
                payload: StoredBuffer = self._stores.fetch(stored.object_id, stored.holder, wait)
            except (ObjectMissing, StoreTimeout, OSError) as error:
                if isinstance(error, StoreTimeout):
                    silent.add(stored.holder)
                logger.warning(
                    f"Client: the result of task {stored.task_id:#x} (object {stored.object_id.hex()}, "
                    f"{stored.size:,} bytes) could not be fetched from {stored.holder} ({error}); "
                    "reported lost, waiting for it to be made again"
                )
                lost.append(stored.object_id)
                continue
            except StoreError as error:
                released.append(stored.object_id)
                fetched.failures.append((stored.task_id, ObjectLostError(
                    f"the result of task {stored.task_id:#x} (object {stored.object_id.hex()}, {stored.size:,} bytes) "
                    f"could not be fetched from its store {stored.holder}: {error}"
                )))
                continue
            released.append(stored.object_id)
            fetched.results.succeeded_ids.append(stored.task_id)
            fetched.results.payloads.append(payload)  # type: ignore[arg-type]  # loads() reads a StoredBuffer
        if lost:
            self._send(m.ObjectsLost(object_ids=lost))
        if released:
            self._send(m.DeleteObjects(object_ids=released))
        return fetched
