"""The store core's account of its memory: every segment it made, the bytes they take, and the recycled ones.

A segment is made for a writer or an arriving object, holds one object, and when that object goes (and no
reader has it mapped) waits in the pool for a request of about its size, or is freed once it idles too
long. Large writers come in runs, so after a large segment is handed out a spare of its size is kept ready
(its pages made in the background, prefault.py) while it fits the capacity. Which objects go to disk to
make room is the core's decision (store_core.py); this only counts and recycles.
"""

from __future__ import annotations

from scaler.store.segment import capacity_for
from scaler.store.segment_pool import SegmentPool
from scaler.store.store_actions import Action, CreateSegment, DestroySegment
from scaler.store.store_records import SegmentRecord, SegmentUse

# Below this, a segment's fresh pages cost little: no spare is kept ready for writers of that size.
SPARE_MIN_BYTES = 8 * 2**20


class SegmentSpace:
    def __init__(self, capacity_bytes: int, pool_idle_seconds: float) -> None:
        self.capacity_bytes = capacity_bytes
        self.segments: dict[int, SegmentRecord] = {}
        self.resident_bytes = 0  # sum of the capacities of self.segments
        self._pool_idle_seconds = pool_idle_seconds
        self._next_segment_id = 1
        self._pool = SegmentPool()

    def add(self, segment: SegmentRecord) -> None:
        self.segments[segment.segment_id] = segment
        self.resident_bytes += segment.capacity

    def pooled(self, size: int) -> SegmentRecord | None:
        """A pooled segment that fits `size` bytes without much waste, taken out of the pool."""
        segment_id = self._pool.best_fit(capacity_for(size))
        if segment_id is None:
            return None
        segment = self.segments[segment_id]
        self._pool.remove(segment_id, segment.capacity)
        return segment

    def new(self, size: int, actions: list[Action]) -> SegmentRecord:
        """A new segment for `size` bytes (the caller made room for it)."""
        segment = SegmentRecord(self._next_segment_id, capacity_for(size), SegmentUse.LENT)
        self._next_segment_id += 1
        self.add(segment)
        actions.append(CreateSegment(segment.segment_id, segment.capacity))
        return segment

    def keep_a_spare(self, capacity: int, now: float, actions: list[Action]) -> None:
        """Writers of large objects come in runs: the next one of this size finds a segment whose pages
        exist already (a fresh page costs more than copying into it), if that fits the capacity."""
        if capacity < SPARE_MIN_BYTES or self._pool.best_fit(capacity) is not None:
            return
        if self.resident_bytes + capacity > self.capacity_bytes:
            return
        spare = SegmentRecord(self._next_segment_id, capacity, SegmentUse.POOLED)
        self._next_segment_id += 1
        self.add(spare)
        self.to_pool(spare, now)
        actions.append(CreateSegment(spare.segment_id, capacity, prefault=True))

    def to_pool(self, segment: SegmentRecord, now: float) -> None:
        assert segment.pins == 0, "a pinned segment is never pooled"
        segment.use = SegmentUse.POOLED
        segment.object_id = b""
        segment.lent_to = 0
        segment.pooled_at = now
        self._pool.add(segment.segment_id, segment.capacity)

    def destroy(self, segment: SegmentRecord, actions: list[Action]) -> None:
        if segment.use is SegmentUse.POOLED:
            self._pool.remove(segment.segment_id, segment.capacity)
        self.forget(segment)
        actions.append(DestroySegment(segment.segment_id))

    def forget(self, segment: SegmentRecord) -> None:
        """The segment is no longer the core's (its object went to disk: the shell frees it once written)."""
        del self.segments[segment.segment_id]
        self.resident_bytes -= segment.capacity

    def destroy_oldest_pooled(self, actions: list[Action]) -> bool:
        """Free the longest pooled segment; False if the pool is empty."""
        if not self._pool:
            return False
        self.destroy(self.segments[self._pool.oldest()], actions)
        return True

    def free_idle(self, now: float, actions: list[Action]) -> None:
        """Free the segments pooled for longer than the idle time."""
        idle_limit = now - self._pool_idle_seconds
        while self._pool:
            segment = self.segments[self._pool.oldest()]
            if segment.pooled_at > idle_limit:
                break
            self.destroy(segment, actions)

    def next_idle_deadline(self) -> float | None:
        """When the longest pooled segment idles out, if any is pooled."""
        if not self._pool:
            return None
        return self.segments[self._pool.oldest()].pooled_at + self._pool_idle_seconds

    def pooled_segment_ids(self) -> list[int]:
        return self._pool.segment_ids()
