"""The ids of objects the store was told to delete while it did not hold them, remembered for a while.

A worker writes a result into its store only when another process is to read it (worker/own_results.py),
so the scheduler's delete of a freed result can overtake a late write of it. The store drops a write of an
id it remembers here; else that object would stay forever, since nobody would delete it again.
"""

from __future__ import annotations

from collections import OrderedDict

# Far longer than any message is in flight, far shorter than any object id is reused.
REMEMBERED_SECONDS = 30.0


class RecentDeletes:
    def __init__(self) -> None:
        self._deleted: OrderedDict[bytes, float] = OrderedDict()  # object id -> when, oldest first

    def __contains__(self, object_id: bytes) -> bool:
        return object_id in self._deleted

    def add(self, object_id: bytes, now: float) -> None:
        self._deleted[object_id] = now
        self._deleted.move_to_end(object_id)

    def expire(self, now: float) -> None:
        forgotten_before = now - REMEMBERED_SECONDS
        deleted = self._deleted
        while deleted and next(iter(deleted.values())) <= forgotten_before:
            deleted.popitem(last=False)
