"""A result kept on the cluster for this client (`submit(..., keep=True)`), and how the client lets go of it.

The scheduler keeps the outcome of a task submitted with keepResults until the client deletes it (PROTOCOL.md
§7, "Kept results"). A small result comes to the client inside its taskResults, as any result does, but
persisted data's (`persist_graph`: TaskGroup.keepInStores), which the Python worker puts into its store
whatever its size but a scalar (PROTOCOL.md, "Kept results stay in stores"). A result in a store stays
there, and the client is told only its object id, size and holder:
`fetch` reads it from there each time it is asked for, so the client never holds it between calls. The
client deletes the object once, when the future is released or collected; a release that comes before the
outcome is carried out when it arrives.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from scaler.errors import ObjectLostError
from scaler.protocol import messages as m
from scaler.protocol.serializer import Serializer, loads
from scaler.store.store_client import StoreError
from scaler.utility.identifiers import kept_result_id

if TYPE_CHECKING:
    from scaler.client.connection import ClientConnection

# How long reading a kept result from its store may wait, at least (it grows with the size, as for results).
_FETCH_WAIT_BASE_SECONDS = 10.0
_FETCH_WAIT_BYTES_PER_SECOND = 20e6


class KeptResult:
    """The client's side of one kept outcome: where a large result is, and whether it was released.

    Called from caller threads (fetch, release, a collected future's finalizer) and the I/O thread (note_stored,
    outcome_arrived): a lock orders release against the outcome."""

    def __init__(self, connection: ClientConnection, task_id: int) -> None:
        self._connection = connection
        self.task_id = task_id
        self.stored: m.StoredResult | None = None
        self._lock = threading.Lock()
        self._arrived = False
        self.released = False
        self._deleted = False

    def note_stored(self, stored: m.StoredResult) -> None:
        """I/O thread: the result is in a store (its future completes with a mark that says so)."""
        self.stored = stored
        self.outcome_arrived()

    def note_remade(self, stored: m.StoredResult) -> None:
        """I/O thread: the result was lost with its store and made again under a new object id."""
        with self._lock:
            self.stored = stored
            released = self.released
        if released:  # released meanwhile: the new copy is not wanted either
            self._delete()

    def outcome_arrived(self) -> None:
        """I/O thread, or a caller that sees the future done: the scheduler now keeps the outcome."""
        with self._lock:
            self._arrived = True
            delete_now = self.released and not self._deleted
            if delete_now:
                self._deleted = True
        if delete_now:
            self._delete()

    def release(self) -> None:
        """Let the cluster drop the outcome (now, or when it arrives). Safe to call twice, from any thread."""
        with self._lock:
            if self.released:
                return
            self.released = True
            delete_now = self._arrived and not self._deleted
            if delete_now:
                self._deleted = True
        if delete_now:
            self._delete()

    def object_id(self) -> bytes:
        """The object under which the scheduler keeps the outcome."""
        stored = self.stored
        return stored.object_id if stored is not None else kept_result_id(self.task_id)

    def fetch(self, serializer: Serializer) -> Any:
        """The large result, read from its store (mapped when the store is on this host) and deserialized."""
        stored = self.stored
        assert stored is not None
        if self.released:
            raise ObjectLostError(f"the kept result of task {self.task_id:#x} was released")
        wait = _FETCH_WAIT_BASE_SECONDS + stored.size / _FETCH_WAIT_BYTES_PER_SECOND
        try:
            payload = self._connection.stores.fetch(stored.object_id, stored.holder, wait)
        except (StoreError, OSError) as error:
            raise ObjectLostError(
                f"the kept result of task {self.task_id:#x} (object {stored.object_id.hex()}, {stored.size:,} bytes) "
                f"could not be read from its store {stored.holder}: {error}"
            ) from error
        return loads(serializer, payload)

    def _delete(self) -> None:
        connection = self._connection
        if connection.is_open:
            # Kept results were never in this client's sent objects or lent memory: nothing to forget there.
            connection.send_lock_free(m.DeleteObjects(object_ids=[self.object_id()]))
