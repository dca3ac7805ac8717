"""What the store's core remembers: its segments, its objects, the gets waiting for an object, its
configuration, and the status its heartbeats report."""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable

from scaler.protocol import data_messages as d
from scaler.store.store_actions import Requester


class SegmentUse(enum.Enum):
    HOLDS = "holds"  # an object's bytes (resident, or being read back from disk)
    LENT = "lent"  # to a local writer, until it seals it
    POOLED = "pooled"  # free, kept for reuse
    ORPHANED = "orphaned"  # its object was deleted while readers had it mapped: pooled once they release it


class ObjectState(enum.Enum):
    RESIDENT = "resident"
    SPILLED = "spilled"
    READING_BACK = "reading back"
    FETCHING = "fetching"
    BORROWED = "borrowed"  # its bytes are in the memory of the local process that lent it (borrowed_memory.py)


@dataclasses.dataclass
class SegmentRecord:
    """A segment of the store's memory, and what it is used for now."""

    segment_id: int
    capacity: int
    use: SegmentUse
    object_id: bytes = b""
    pins: int = 0
    lent_to: int = 0
    pooled_at: float = 0.0


@dataclasses.dataclass
class ObjectRecord:
    """An object the store holds or is about to hold, and where its bytes are."""

    object_id: bytes
    size: int
    state: ObjectState
    name: str = ""
    segment_id: int | None = None
    loan: d.MemoryLoan | None = None  # BORROWED: where its bytes are


@dataclasses.dataclass
class PendingGet:
    """A get of an object that is not here yet: answered when it arrives, or as missing at `deadline`."""

    requester: Requester
    object_id: bytes
    local: bool
    pid: int
    deadline: float
    max_frame_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """What the store's core is started with."""

    capacity_bytes: int
    own_address: str = ""  # this store's data address: a get naming it as holder is not fetched
    pool_idle_seconds: float = 30.0


@dataclasses.dataclass(frozen=True)
class StoreStatus:
    """What a heartbeat reports; every byte count is of this store's memory unless it says otherwise."""

    capacity_bytes: int
    resident_bytes: int  # all segments: objects', lent, pooled, orphaned
    held_bytes: int  # payload bytes of the objects held, in memory or on disk
    spilled_bytes: int  # payload bytes on disk
    pinned_bytes: int  # segments some reader has mapped (or a send reads)
    pooled_bytes: int
    lent_bytes: int
    object_count: int
    waiting_gets: int

    @staticmethod
    def of(
        capacity_bytes: int, resident_bytes: int, objects: Iterable[ObjectRecord], segments: Iterable[SegmentRecord],
        waiting_gets: int,
    ) -> StoreStatus:
        held = spilled = count = 0
        for record in objects:
            if record.state is ObjectState.FETCHING:
                continue
            count += 1
            held += record.size
            if record.state is ObjectState.SPILLED:
                spilled += record.size
        by_use = {use: 0 for use in SegmentUse}
        pinned = 0
        for segment in segments:
            by_use[segment.use] += segment.capacity
            if segment.pins:
                pinned += segment.capacity
        return StoreStatus(
            capacity_bytes=capacity_bytes,
            resident_bytes=resident_bytes,
            held_bytes=held,
            spilled_bytes=spilled,
            pinned_bytes=pinned,
            pooled_bytes=by_use[SegmentUse.POOLED],
            lent_bytes=by_use[SegmentUse.LENT],
            object_count=count,
            waiting_gets=waiting_gets,
        )
