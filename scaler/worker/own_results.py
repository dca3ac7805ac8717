"""The values of the large results this processor made, kept for the dependents placed here.

A large result goes into the host's store (other processes read it from there), but the processor that
made it still has the Python value: a dependent that the scheduler places on this worker (it prefers the
worker that made an input, placement.py) uses that value as it is, without asking the store, mapping or
deserializing anything. That is most of the cost of a chain of array tasks on one host.

A value goes when the scheduler frees its object (it tells the worker that made it, object_table.py), or
sooner when newer results need the room: the budget is in bytes, oldest out first.
A dependent gets the very object the task returned, as every dependent on one processor shares a value
read from the store: tasks must not change their inputs in place (dask's rule as well).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

# Per processor: a few hundred array chunks of typical sizes, and never much of the host's memory.
OWN_RESULTS_BYTES = 256 * 1024 * 1024

# What take() returns for a value not kept here (None may be a value).
ABSENT = object()


class OwnResults:
    def __init__(self, limit_bytes: int = OWN_RESULTS_BYTES) -> None:
        self._limit = limit_bytes
        self._values: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def byte_count(self) -> int:
        return self._bytes

    def add(self, object_id: bytes, value: Any, size: int) -> None:
        """Keep `value` (its stored size `size`) unless it alone is over the limit; drop the oldest for room."""
        if size > self._limit:
            return
        self._values[object_id] = (value, size)
        self._bytes += size
        while self._bytes > self._limit:
            _, (_, dropped) = self._values.popitem(last=False)
            self._bytes -= dropped

    def take(self, object_id: bytes) -> Any:
        """The value, no longer kept here (the caller keeps it while the object lives), or ABSENT."""
        entry = self._values.pop(object_id, None)
        if entry is None:
            return ABSENT
        self._bytes -= entry[1]
        return entry[0]

    def forget(self, object_ids: list[bytes]) -> None:
        for object_id in object_ids:
            entry = self._values.pop(object_id, None)
            if entry is not None:
                self._bytes -= entry[1]

