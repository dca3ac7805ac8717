"""Large results written into the store only when a process other than their maker is to read them.

A processor keeps the value of each large result it makes (own_results.py), and the scheduler places
the result's dependents on that worker when it can (placement.py): in a dask.array graph nearly every
large intermediate is read only by the processor that made it, and freed soon after. Writing each into
the store anyway costs a segment, a copy of its bytes and two store requests, for nothing.

So a large result is reported as stored in this worker's store (its id, size and holder) at once, and
written there only when someone else is to read it: the scheduler asks (publishObjects: a dependent
placed on another worker, a client that wants it), or the agent does (a dependent given to another
processor of this worker); this processor writes all of them before it hands its queue to another
(nesting). A reader that comes first waits: a store's `get` waits for an object
that is not there yet. Past `DEFERRED_BYTES`, the oldest are written anyway, so that the values kept
here for the store stay bounded. A result freed before any of this is never written. If the processor
dies first, its agent reports them lost, and the scheduler makes them again (lineage.py); so it does
with those of a worker that leaves.
"""

from __future__ import annotations

from collections import OrderedDict

from scaler.protocol.stored_payload import PreparedPayload

# Per processor: the bytes of the results kept only here, beyond which the oldest go to the store.
DEFERRED_BYTES = 256 * 1024 * 1024


class DeferredResults:
    """The large results made here and not written yet, oldest first: a pure record, no I/O."""

    def __init__(self, limit_bytes: int = DEFERRED_BYTES) -> None:
        self._limit = limit_bytes
        self._waiting: OrderedDict[bytes, PreparedPayload] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def byte_count(self) -> int:
        return self._bytes

    def defer(self, object_id: bytes, payload: PreparedPayload) -> list[tuple[bytes, PreparedPayload]]:
        """Keep it unwritten; returns the oldest ones to write now for room (perhaps this one)."""
        self._waiting[object_id] = payload
        self._bytes += payload.size
        overflow = []
        while self._bytes > self._limit:
            oldest, written = self._waiting.popitem(last=False)
            self._bytes -= written.size
            overflow.append((oldest, written))
        return overflow

    def take(self, object_ids: list[bytes]) -> list[tuple[bytes, PreparedPayload]]:
        """Those of these results still unwritten, to write now; the others were written or freed."""
        taken = []
        for object_id in object_ids:
            payload = self._waiting.pop(object_id, None)
            if payload is not None:
                self._bytes -= payload.size
                taken.append((object_id, payload))
        return taken

    def take_all(self) -> list[tuple[bytes, PreparedPayload]]:
        taken = list(self._waiting.items())
        self._waiting.clear()
        self._bytes = 0
        return taken

    def forget(self, object_ids: list[bytes]) -> None:
        """Freed by the scheduler: never to be written."""
        for object_id in object_ids:
            payload = self._waiting.pop(object_id, None)
            if payload is not None:
                self._bytes -= payload.size
