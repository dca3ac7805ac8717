"""The gets a store cannot answer yet: the object is being fetched, read back from disk, or not here at all.

Each waits until the object arrives (answered then) or its own deadline passes (answered `missing`), and
all of an object's waiters are answered `missing` at once when the object is deleted or lost.
"""

from __future__ import annotations

from collections.abc import Iterator

from scaler.store.store_records import PendingGet


class PendingGets:
    def __init__(self) -> None:
        self._by_object: dict[bytes, list[PendingGet]] = {}

    def __len__(self) -> int:
        return sum(map(len, self._by_object.values()))

    def add(self, get: PendingGet) -> None:
        self._by_object.setdefault(get.object_id, []).append(get)

    def take(self, object_id: bytes) -> list[PendingGet]:
        """Every get waiting for this object, no longer waiting."""
        return self._by_object.pop(object_id, [])

    def expire(self, now: float) -> Iterator[tuple[bytes, list[PendingGet], bool]]:
        """The gets whose wait is over, by object, and whether none is left waiting for that object."""
        for object_id, waiting in list(self._by_object.items()):
            expired = [get for get in waiting if get.deadline <= now]
            if not expired:
                continue
            kept = [get for get in waiting if get.deadline > now]
            if kept:
                self._by_object[object_id] = kept
            else:
                del self._by_object[object_id]
            yield object_id, expired, not kept

    def deadlines(self) -> list[float]:
        return [get.deadline for waiting in self._by_object.values() for get in waiting]
