"""The large results this processor made: their values, kept for the dependents placed here, and their bytes,
written into the store only when another process is to read them. One record per result, one byte budget.

A large result is reported as a stored object of this worker's store (its id, size and holder) at once, but
the processor that made it still has the Python value: a dependent that the scheduler places on this worker
(it prefers the worker that made an input, placement.py) uses that value as it is, without asking the store,
mapping or deserializing anything. That is most of the cost of a chain of array tasks on one host. A
dependent gets the very object the task returned, as every dependent on one processor shares a value read
from the store: tasks must not change their inputs in place (dask's rule as well).

In a dask.array graph nearly every large intermediate is read only by the processor that made it, and freed
soon after, so writing each into the store anyway would cost a segment, a copy of its bytes and two store
requests for nothing. Its bytes are written when someone else is to read it: the scheduler asks
(publishObjects: a dependent placed on another worker, a client that wants it), or the agent does (a
dependent given to another processor of this worker); this processor writes all of them before it hands its
queue to another (nesting). A reader that comes first waits: a store's `get` waits for an object that is
not there yet. A result freed before any of this is never written. If the processor dies first, its agent
reports them lost, and the scheduler makes them again (lineage.py); so it does with those of a worker that
leaves.

A record goes when the scheduler frees its object (it tells the worker that made it, object_table.py), or
sooner when newer results need the room: past `OWN_RESULTS_BYTES`, the oldest are written if they were not
yet and their values dropped, so that what this processor keeps for itself and for the store stays bounded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from scaler.protocol.stored_payload import PreparedPayload

# Per processor: a few hundred array chunks of typical sizes, and never much of the host's memory. The value
# and its unwritten bytes share most of their memory (an array's buffers are pickled out-of-band, not copied),
# so a result counts once, by its stored size.
OWN_RESULTS_BYTES = 256 * 1024 * 1024

# What take() returns for a value not kept here (None may be a value).
ABSENT = object()

# (object id, its bytes): what the caller is to write into the store now.
ToWrite = list[tuple[bytes, PreparedPayload]]


class _OwnResult:
    __slots__ = ("value", "unwritten", "size")

    def __init__(self, value: Any, unwritten: PreparedPayload | None, size: int) -> None:
        self.value = value  # ABSENT once handed to a dependent or dropped
        self.unwritten = unwritten  # None once written
        self.size = size


class OwnResults:
    """The large results made here that still hold a value or unwritten bytes, oldest first: a pure record."""

    def __init__(self, limit_bytes: int = OWN_RESULTS_BYTES) -> None:
        self._limit = limit_bytes
        self._results: OrderedDict[bytes, _OwnResult] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._results)

    @property
    def byte_count(self) -> int:
        return self._bytes

    def add(self, object_id: bytes, value: Any, payload: PreparedPayload) -> ToWrite:
        """Keep the value and leave its bytes unwritten; returns what to write now for room: the oldest results
        (their values dropped too), or this one alone when it is over the budget by itself (nothing kept)."""
        size = payload.size
        if size > self._limit:
            return [(object_id, payload)]
        self._results[object_id] = _OwnResult(value, payload, size)
        self._bytes += size
        to_write: ToWrite = []
        while self._bytes > self._limit:
            oldest_id, oldest = self._results.popitem(last=False)
            self._bytes -= oldest.size
            if oldest.unwritten is not None:
                to_write.append((oldest_id, oldest.unwritten))
        return to_write

    def take(self, object_id: bytes) -> Any:
        """The value, no longer kept here (the caller keeps it while the object lives), or ABSENT."""
        result = self._results.get(object_id)
        if result is None:
            return ABSENT
        value = result.value
        result.value = ABSENT
        if result.unwritten is None:
            self._drop(object_id)
        return value

    def to_write(self, object_ids: list[bytes]) -> ToWrite:
        """Those of these results not written yet, to write now; their values stay."""
        to_write: ToWrite = []
        for object_id in object_ids:
            result = self._results.get(object_id)
            if result is not None and result.unwritten is not None:
                to_write.append((object_id, result.unwritten))
                result.unwritten = None
                if result.value is ABSENT:
                    self._drop(object_id)
        return to_write

    def all_to_write(self) -> ToWrite:
        return self.to_write(list(self._results))

    def forget(self, object_ids: list[bytes]) -> None:
        """Freed by the scheduler: neither kept nor written."""
        for object_id in object_ids:
            if object_id in self._results:
                self._drop(object_id)

    def _drop(self, object_id: bytes) -> None:
        self._bytes -= self._results.pop(object_id).size
