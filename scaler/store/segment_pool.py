"""The recycled segments of a store, by size: fresh memory costs page faults, reused memory does not.

A segment whose object was deleted (and that no reader has mapped) waits here for a request of about
its size; one that waits longer than the store's idle time is freed, the longest waiting first.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

# A pooled segment serves a request up to this fraction larger than needed; beyond, it wastes memory.
POOL_FIT_SLACK = 0.25


class SegmentPool:
    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()  # pooled segment ids, longest pooled first
        self._by_capacity: dict[int, list[int]] = {}
        self._capacities: list[int] = []  # sorted keys of _by_capacity

    def __bool__(self) -> bool:
        return bool(self._order)

    def segment_ids(self) -> list[int]:
        """Longest pooled first."""
        return list(self._order)

    def oldest(self) -> int:
        """The longest pooled segment's id; the pool must not be empty."""
        return next(iter(self._order))

    def add(self, segment_id: int, capacity: int) -> None:
        self._order[segment_id] = None
        same_size = self._by_capacity.get(capacity)
        if same_size is None:
            same_size = self._by_capacity[capacity] = []
            bisect.insort(self._capacities, capacity)
        same_size.append(segment_id)

    def remove(self, segment_id: int, capacity: int) -> None:
        del self._order[segment_id]
        same_size = self._by_capacity[capacity]
        same_size.remove(segment_id)
        if not same_size:
            del self._by_capacity[capacity]
            self._capacities.remove(capacity)

    def best_fit(self, capacity: int) -> int | None:
        """The most recently pooled of the smallest segments that hold `capacity` bytes without much waste."""
        index = bisect.bisect_left(self._capacities, capacity)
        if index < len(self._capacities) and self._capacities[index] <= capacity * (1 + POOL_FIT_SLACK):
            return self._by_capacity[self._capacities[index]][-1]
        return None
