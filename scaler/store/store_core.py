"""The store's decisions, as a state machine: events in (each with `now`), actions out; no I/O, no clock.

The store holds objects in shared-memory segments. This core decides which segment each object gets
(a new one, or a recycled one of the same size from the pool; after a large one is handed out, a spare of
its size is kept ready, its pages made in the background: prefault.py), which objects it borrows instead
(their bytes stay in the memory of the local writer that lent them, until it exits or the object is
deleted: borrowed_memory.py; they take none of the capacity and never spill), which objects go to disk when the
resident bytes pass the capacity (least recently used first, never one that a reader has mapped), when
a waiting `get` is answered, and when a segment may be reused: only once no reader has it mapped.

The I/O shell (server.py) owns the real segments, spill files and sockets, executes the actions in the
order given, and reports back what it was asked to report (`on_read_back_done`, `on_fetched`, ...).
Segments are named by ids that this core hands out; readers are processes (pinning what they map) or
transfers (a remote send in flight, pinning the segment zmq reads from).
"""

from __future__ import annotations

from collections import OrderedDict

from scaler.protocol import data_messages as d
from scaler.store.recent_deletes import RecentDeletes
from scaler.store.segment import capacity_for
from scaler.store.segment_pool import SegmentPool
from scaler.store.store_actions import (
    Action,
    CreateSegment,
    DestroySegment,
    DropSpill,
    Fetch,
    GrantSegment,
    Locate,
    ReadBack,
    ReaderId,
    Reply,
    ReportHeld,
    ReportLost,
    Requester,
    SendBorrowed,
    SendObject,
    SpillObject,
    UnwatchProcess,
    WatchProcess,
    WritePayload,
    process_reader,
    transfer_reader,
)
from scaler.store.store_records import (
    ObjectRecord,
    ObjectState,
    PendingGet,
    SegmentRecord,
    SegmentUse,
    StoreConfig,
    StoreStatus,
)

# How long spilling rests after the spill directory failed (full disk): the store runs over capacity
# meanwhile rather than retrying the disk at every request.
SPILL_RETRY_SECONDS = 10.0
# Below this, a segment's fresh pages cost little: no spare is kept ready for writers of that size.
SPARE_MIN_BYTES = 8 * 2**20


class StoreCore:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.segments: dict[int, SegmentRecord] = {}
        self.objects: dict[bytes, ObjectRecord] = {}
        self.resident_bytes = 0  # sum of the capacities of self.segments
        self._next_segment_id = 1
        self._next_transfer = 1
        self._lru: OrderedDict[bytes, None] = OrderedDict()  # resident objects, least recently used first
        self._pool = SegmentPool()
        self._pins: dict[ReaderId, dict[bytes, list[int]]] = {}  # reader -> object id -> pinned segment ids
        self._pending: dict[bytes, list[PendingGet]] = {}
        self._loans: dict[int, int] = {}  # pid -> segments it borrowed and has not sealed
        self._borrowed: dict[int, set[bytes]] = {}  # pid -> objects it lent this store (in its memory)
        self._spill_resumes_at = 0.0
        self._deleted_unheld = RecentDeletes()

    # ------------------------------------------------------------------------------------------ events

    def on_allocate(self, requester: Requester, size: int, pid: int, now: float) -> list[Action]:
        """A local writer wants a segment of at least `size` bytes to write an object into."""
        if pid <= 0:
            return [self._failed(requester, "allocate needs the writer's pid (local writers only)")]
        if size <= 0:
            return [self._failed(requester, f"cannot allocate {size} bytes")]
        actions: list[Action] = []
        segment = self._take_segment(size, now, actions)
        segment.use = SegmentUse.LENT
        segment.lent_to = pid
        if not self._holds_anything(pid):
            actions.append(WatchProcess(pid))
        self._loans[pid] = self._loans.get(pid, 0) + 1
        actions.append(GrantSegment(requester, segment.segment_id, size))
        self._keep_a_spare(segment.capacity, now, actions)
        self._enforce_capacity(now, actions)
        return actions

    def on_seal(
        self, requester: Requester, segment_id: int | None, object_id: bytes, size: int, name: str, pid: int,
        now: float,
    ) -> list[Action]:
        """A local writer hands over the segment it wrote (`segment_id` None: the path named no segment)."""
        segment = self.segments.get(segment_id) if segment_id is not None else None
        if segment is None or segment.use is not SegmentUse.LENT or segment.lent_to != pid:
            return [self._failed(requester, "seal: that segment was not allocated to this process (or is sealed)")]
        if not 0 < size <= segment.capacity:
            return [self._failed(requester, f"seal: {size:,} bytes do not fit the {segment.capacity:,}-byte segment")]
        if not object_id:
            return [self._failed(requester, "seal: an object needs an id")]
        actions: list[Action] = []
        self._end_loan(pid, actions)
        existing = self.objects.get(object_id)
        if (existing is not None and existing.state is not ObjectState.FETCHING) or object_id in self._deleted_unheld:
            self._to_pool(segment, now)  # a second copy of an object we hold, or one deleted already
        else:
            segment.use = SegmentUse.HOLDS
            self._make_resident(object_id, size, name, segment, now, actions)
            actions.append(ReportHeld(((object_id, size),)))
        actions.append(Reply(requester, d.Stored(requester.request_id, object_id)))
        self._enforce_capacity(now, actions)
        return actions

    def on_lend(
        self, requester: Requester, object_id: bytes, size: int, name: str, loan: d.MemoryLoan, now: float
    ) -> list[Action]:
        """A local writer lends an object: its bytes stay in its memory (the shell checked they can be read)."""
        if not object_id or size <= 0:
            return [self._failed(requester, "lend: an object needs an id and a payload")]
        actions: list[Action] = []
        existing = self.objects.get(object_id)
        if (existing is None or existing.state is ObjectState.FETCHING) and object_id not in self._deleted_unheld:
            if not self._holds_anything(loan.pid):
                actions.append(WatchProcess(loan.pid))
            self._borrowed.setdefault(loan.pid, set()).add(object_id)
            record = ObjectRecord(object_id, size, ObjectState.BORROWED, name, loan=loan)
            self.objects[object_id] = record
            self._answer_waiting(record, actions)
            actions.append(ReportHeld(((object_id, size),)))
        actions.append(Reply(requester, d.Stored(requester.request_id, object_id)))
        return actions

    def on_loan_broken(self, object_id: bytes, reason: str, now: float) -> list[Action]:
        """The shell could not read a borrowed object (its lender let it go, or exited): it is lost."""
        record = self.objects.get(object_id)
        if record is None or record.state is not ObjectState.BORROWED:
            return []
        actions: list[Action] = []
        self._drop_borrowed(record, actions)
        self._answer_missing(object_id, f"lost: {reason}", actions)
        actions.append(ReportLost((object_id,)))
        return actions

    def on_put(self, requester: Requester, object_id: bytes, size: int, name: str, now: float) -> list[Action]:
        """A remote writer sends an object; its payload (`size` bytes) comes with the message."""
        if not object_id or size <= 0:
            return [self._failed(requester, "put: an object needs an id and a payload")]
        actions: list[Action] = []
        existing = self.objects.get(object_id)
        if existing is None or existing.state is ObjectState.FETCHING:
            self._receive(object_id, size, name, now, actions)
        actions.append(Reply(requester, d.Stored(requester.request_id, object_id)))
        self._enforce_capacity(now, actions)
        return actions

    def on_get(
        self, requester: Requester, object_id: bytes, local: bool, pid: int, wait_seconds: float, holder: str,
        now: float, max_frame_bytes: int = 0,
    ) -> list[Action]:
        """Someone wants an object: mapped (local) or sent (remote); from `holder` if this store lacks it."""
        if local and pid <= 0:
            return [self._failed(requester, "a local get needs the reader's pid")]
        pending = PendingGet(requester, object_id, local, pid, now + max(0.0, wait_seconds), max_frame_bytes)
        actions: list[Action] = []
        record = self.objects.get(object_id)
        if record is None:
            if holder and holder != self.config.own_address:
                self.objects[object_id] = ObjectRecord(object_id, 0, ObjectState.FETCHING)
                actions.append(Fetch(object_id, holder, int(max(0.0, wait_seconds) * 1000)))
            elif wait_seconds <= 0:
                return [Reply(requester, d.Missing(requester.request_id, object_id, "not held by this store"))]
            self._pending.setdefault(object_id, []).append(pending)
        elif record.state is ObjectState.RESIDENT or record.state is ObjectState.BORROWED:
            self._answer(pending, record, actions)
        elif record.state is ObjectState.SPILLED:
            self._pending.setdefault(object_id, []).append(pending)
            self._start_read_back(record, now, actions)
        else:  # being read back or fetched
            self._pending.setdefault(object_id, []).append(pending)
        self._enforce_capacity(now, actions)
        return actions

    def on_release(self, pid: int, object_ids: list[bytes], now: float) -> list[Action]:
        """A local reader unmapped these objects (one mapping each; an id twice for two mappings)."""
        actions: list[Action] = []
        held_before = self._holds_anything(pid)
        reader = process_reader(pid)
        for object_id in object_ids:
            self._unpin(reader, object_id, now)
        if held_before and not self._holds_anything(pid):
            actions.append(UnwatchProcess(pid))
        self._enforce_capacity(now, actions)
        return actions

    def on_process_gone(self, pid: int, now: float) -> list[Action]:
        """A local process exited: its mappings are gone, and so is whatever it was writing."""
        actions: list[Action] = []
        reader = process_reader(pid)
        for object_id, segment_ids in list(self._pins.get(reader, {}).items()):
            for _ in range(len(segment_ids)):
                self._unpin(reader, object_id, now)
        for segment in list(self.segments.values()):
            if segment.use is SegmentUse.LENT and segment.lent_to == pid:
                self._to_pool(segment, now)
        self._loans.pop(pid, None)
        lost = [self.objects[object_id] for object_id in self._borrowed.get(pid, ())]
        for record in lost:
            self._drop_borrowed(record, actions)
            self._answer_missing(record.object_id, "lost: the process that lent it exited", actions)
        if lost:
            actions.append(ReportLost(tuple(record.object_id for record in lost)))
        self._enforce_capacity(now, actions)
        return actions

    def on_transfer_done(self, transfer: int, now: float) -> list[Action]:
        """zmq no longer reads the segment of this send."""
        reader = transfer_reader(transfer)
        for object_id in list(self._pins.get(reader, {})):
            self._unpin(reader, object_id, now)
        actions: list[Action] = []
        self._enforce_capacity(now, actions)
        return actions

    def on_fetched(self, object_id: bytes, size: int, now: float) -> list[Action]:
        """The holder sent the object we fetch; its payload comes with the message. Ignored if nobody waits."""
        record = self.objects.get(object_id)
        if record is None or record.state is not ObjectState.FETCHING or size <= 0:
            return []
        actions: list[Action] = []
        self._receive(object_id, size, "", now, actions)
        self._enforce_capacity(now, actions)
        return actions

    def on_fetch_failed(self, object_id: bytes, reason: str, now: float) -> list[Action]:
        record = self.objects.get(object_id)
        if record is None or record.state is not ObjectState.FETCHING:
            return []
        del self.objects[object_id]
        actions: list[Action] = []
        self._answer_missing(object_id, f"fetch failed: {reason}", actions)
        return actions

    def on_spill_failed(self, object_id: bytes, segment_id: int, capacity: int, now: float) -> list[Action]:
        """The spill file could not be written: the segment still holds the object; spilling rests a while."""
        self._spill_resumes_at = now + SPILL_RETRY_SECONDS
        record = self.objects.get(object_id)
        segment = SegmentRecord(segment_id, capacity, SegmentUse.HOLDS, object_id=object_id)
        self._add_segment(segment)
        if record is None or record.state is not ObjectState.SPILLED:
            self._to_pool(segment, now)  # deleted meanwhile
            return []
        record.state = ObjectState.RESIDENT
        record.segment_id = segment_id
        self._lru[object_id] = None
        self._lru.move_to_end(object_id, last=False)  # still the first to go when spilling resumes
        return []

    def on_read_back_done(self, object_id: bytes, ok: bool, reason: str, now: float) -> list[Action]:
        """The ReadBack of this object finished (or failed: the object is lost)."""
        record = self.objects.get(object_id)
        if record is None or record.state is not ObjectState.READING_BACK or record.segment_id is None:
            return []
        actions: list[Action] = []
        segment = self.segments[record.segment_id]
        if not ok:
            del self.objects[object_id]
            self._to_pool(segment, now)
            self._answer_missing(object_id, f"lost: its spill file could not be read ({reason})", actions)
            actions.append(ReportLost((object_id,)))
            self._enforce_capacity(now, actions)
            return actions
        record.state = ObjectState.RESIDENT
        self._lru[object_id] = None
        self._answer_waiting(record, actions)
        self._enforce_capacity(now, actions)
        return actions

    def on_delete(self, object_ids: list[bytes], now: float) -> list[Action]:
        """Nobody needs these objects any more (the scheduler's order)."""
        actions: list[Action] = []
        for object_id in object_ids:
            record = self.objects.pop(object_id, None)
            if record is None:
                self._deleted_unheld.add(object_id, now)
                continue
            self._answer_missing(object_id, "deleted", actions)
            if record.state is ObjectState.BORROWED:
                self._forget_lender_of(record, actions)
                continue
            if record.state is ObjectState.SPILLED:
                actions.append(DropSpill(object_id))
                continue
            if record.segment_id is None:
                continue  # was being fetched: the late answer is ignored
            if record.state is ObjectState.READING_BACK:
                actions.append(DropSpill(object_id))  # the shell has not read it back yet: drop the file too
            self._lru.pop(object_id, None)
            segment = self.segments[record.segment_id]
            if segment.pins:
                segment.use = SegmentUse.ORPHANED
            else:
                self._to_pool(segment, now)
        self._enforce_capacity(now, actions)
        return actions

    def on_tick(self, now: float) -> list[Action]:
        """Answer the gets whose wait is over; free segments pooled for too long; spill if spilling rested."""
        actions: list[Action] = []
        for object_id, waiting in list(self._pending.items()):
            expired = [get for get in waiting if get.deadline <= now]
            if not expired:
                continue
            kept = [get for get in waiting if get.deadline > now]
            if kept:
                self._pending[object_id] = kept
            else:
                del self._pending[object_id]
            for get in expired:
                reason = "not here in time" if object_id not in self.objects else "still being fetched"
                actions.append(Reply(get.requester, d.Missing(get.requester.request_id, object_id, reason)))
            record = self.objects.get(object_id)
            if not kept and record is not None and record.state is ObjectState.FETCHING:
                del self.objects[object_id]  # nobody waits any more: the late answer is ignored
        self._deleted_unheld.expire(now)
        idle_limit = now - self.config.pool_idle_seconds
        while self._pool:
            segment = self.segments[self._pool.oldest()]
            if segment.pooled_at > idle_limit:
                break
            self._destroy(segment, actions)
        self._enforce_capacity(now, actions)
        return actions

    # ------------------------------------------------------------------------------------------ views

    def next_deadline(self) -> float | None:
        """When on_tick next has something to do (a wait ends, a pooled segment idles out), if ever."""
        deadlines = [get.deadline for waiting in self._pending.values() for get in waiting]
        if self._pool:
            deadlines.append(self.segments[self._pool.oldest()].pooled_at + self.config.pool_idle_seconds)
        return min(deadlines) if deadlines else None

    def status(self) -> StoreStatus:
        return StoreStatus.of(
            self.config.capacity_bytes, self.resident_bytes, self.objects.values(), self.segments.values(),
            sum(map(len, self._pending.values())),
        )

    def spillable(self) -> list[bytes]:
        """Resident objects that may go to disk now (nobody has them mapped), least recently used first."""
        return [object_id for object_id in self._lru if not self._segment_of(object_id).pins]

    def pooled_segment_ids(self) -> list[int]:
        return self._pool.segment_ids()

    def spilling_rests(self, now: float) -> bool:
        return now < self._spill_resumes_at

    # ------------------------------------------------------------------------------------------ internals

    def _holds_anything(self, pid: int) -> bool:
        """Whether the store watches this process: it has segments mapped or borrowed, or lent us objects."""
        return bool(self._pins.get(process_reader(pid))) or bool(self._loans.get(pid)) or pid in self._borrowed

    def _drop_borrowed(self, record: ObjectRecord, actions: list[Action]) -> None:
        """Forget a borrowed object that is lost."""
        del self.objects[record.object_id]
        self._forget_lender_of(record, actions)

    def _forget_lender_of(self, record: ObjectRecord, actions: list[Action]) -> None:
        """A borrowed object is gone from `objects`: stop watching its lender if that was all it lent."""
        assert record.loan is not None
        pid = record.loan.pid
        lent = self._borrowed.get(pid)
        if lent is not None:
            lent.discard(record.object_id)
            if not lent:
                del self._borrowed[pid]
                if not self._holds_anything(pid):
                    actions.append(UnwatchProcess(pid))

    def _end_loan(self, pid: int, actions: list[Action]) -> None:
        left = self._loans.get(pid, 0) - 1
        if left > 0:
            self._loans[pid] = left
        else:
            self._loans.pop(pid, None)
            if not self._holds_anything(pid):
                actions.append(UnwatchProcess(pid))

    @staticmethod
    def _failed(requester: Requester, reason: str) -> Reply:
        return Reply(requester, d.Failed(requester.request_id, reason))

    def _segment_of(self, object_id: bytes) -> SegmentRecord:
        segment_id = self.objects[object_id].segment_id
        assert segment_id is not None
        return self.segments[segment_id]

    def _add_segment(self, segment: SegmentRecord) -> None:
        self.segments[segment.segment_id] = segment
        self.resident_bytes += segment.capacity

    def _take_segment(self, size: int, now: float, actions: list[Action]) -> SegmentRecord:
        """A segment for `size` bytes: a pooled one that fits, else a new one (making room for it first)."""
        capacity = capacity_for(size)
        pooled = self._pool.best_fit(capacity)
        if pooled is not None:
            segment = self.segments[pooled]
            self._leave_pool(segment)
            return segment
        self._make_room(capacity, now, actions)
        segment = SegmentRecord(self._next_segment_id, capacity, SegmentUse.LENT)
        self._next_segment_id += 1
        self._add_segment(segment)
        actions.append(CreateSegment(segment.segment_id, capacity))
        return segment

    def _keep_a_spare(self, capacity: int, now: float, actions: list[Action]) -> None:
        """Writers of large objects come in runs: the next one of this size finds a segment whose pages
        exist already (a fresh page costs more than copying into it), if that fits the capacity."""
        if capacity < SPARE_MIN_BYTES or self._pool.best_fit(capacity) is not None:
            return
        if self.resident_bytes + capacity > self.config.capacity_bytes:
            return
        spare = SegmentRecord(self._next_segment_id, capacity, SegmentUse.POOLED)
        self._next_segment_id += 1
        self._add_segment(spare)
        self._to_pool(spare, now)
        actions.append(CreateSegment(spare.segment_id, capacity, prefault=True))

    def _to_pool(self, segment: SegmentRecord, now: float) -> None:
        assert segment.pins == 0, "a pinned segment is never pooled"
        segment.use = SegmentUse.POOLED
        segment.object_id = b""
        segment.lent_to = 0
        segment.pooled_at = now
        self._pool.add(segment.segment_id, segment.capacity)

    def _leave_pool(self, segment: SegmentRecord) -> None:
        self._pool.remove(segment.segment_id, segment.capacity)

    def _destroy(self, segment: SegmentRecord, actions: list[Action]) -> None:
        if segment.use is SegmentUse.POOLED:
            self._leave_pool(segment)
        del self.segments[segment.segment_id]
        self.resident_bytes -= segment.capacity
        actions.append(DestroySegment(segment.segment_id))

    def _make_room(self, extra: int, now: float, actions: list[Action]) -> None:
        """Free memory until `extra` more bytes fit the capacity: pooled segments first, then LRU spilling."""
        while self.resident_bytes + extra > self.config.capacity_bytes:
            if self._pool:
                self._destroy(self.segments[self._pool.oldest()], actions)
                continue
            if self.spilling_rests(now) or not self._spill_one(actions):
                return  # everything left is mapped by readers (or lent to writers): over capacity until released

    def _enforce_capacity(self, now: float, actions: list[Action]) -> None:
        self._make_room(0, now, actions)

    def _spill_one(self, actions: list[Action]) -> bool:
        for object_id in self._lru:
            segment = self._segment_of(object_id)
            if segment.pins:
                continue
            record = self.objects[object_id]
            del self._lru[object_id]
            record.state = ObjectState.SPILLED
            record.segment_id = None
            del self.segments[segment.segment_id]
            self.resident_bytes -= segment.capacity
            actions.append(SpillObject(object_id, segment.segment_id, record.size))
            return True
        return False

    def _start_read_back(self, record: ObjectRecord, now: float, actions: list[Action]) -> None:
        segment = self._take_segment(record.size, now, actions)
        segment.use = SegmentUse.HOLDS
        segment.object_id = record.object_id
        record.state = ObjectState.READING_BACK
        record.segment_id = segment.segment_id
        actions.append(ReadBack(record.object_id, segment.segment_id))

    def _receive(self, object_id: bytes, size: int, name: str, now: float, actions: list[Action]) -> None:
        """An object arrives with a message (a put, a fetched object): into a segment, and answer its waiters."""
        segment = self._take_segment(size, now, actions)
        segment.use = SegmentUse.HOLDS
        actions.append(WritePayload(segment.segment_id, size))
        self._make_resident(object_id, size, name, segment, now, actions)
        actions.append(ReportHeld(((object_id, size),)))

    def _make_resident(
        self, object_id: bytes, size: int, name: str, segment: SegmentRecord, now: float, actions: list[Action]
    ) -> None:
        segment.object_id = object_id
        record = ObjectRecord(object_id, size, ObjectState.RESIDENT, name, segment.segment_id)
        self.objects[object_id] = record
        self._lru[object_id] = None
        self._answer_waiting(record, actions)

    def _answer_waiting(self, record: ObjectRecord, actions: list[Action]) -> None:
        for pending in self._pending.pop(record.object_id, []):
            self._answer(pending, record, actions)

    def _answer(self, pending: PendingGet, record: ObjectRecord, actions: list[Action]) -> None:
        if record.state is ObjectState.BORROWED:
            assert record.loan is not None
            requester = pending.requester
            if pending.local:  # nothing to pin: the reader reads the lender's memory, or falls back to a remote get
                actions.append(Reply(requester, d.Borrowed(requester.request_id, record.object_id, record.size,
                                                           record.loan)))
            else:
                actions.append(SendBorrowed(requester, record.object_id, record.size, record.loan,
                                            pending.max_frame_bytes))
            return
        segment_id = record.segment_id
        assert segment_id is not None and record.state is ObjectState.RESIDENT
        self._lru.move_to_end(record.object_id)
        if pending.local:
            if not self._holds_anything(pending.pid):
                actions.append(WatchProcess(pending.pid))
            self._pin(process_reader(pending.pid), record.object_id, segment_id)
            actions.append(Locate(pending.requester, record.object_id, segment_id, record.size))
        else:
            transfer = self._next_transfer
            self._next_transfer += 1
            self._pin(transfer_reader(transfer), record.object_id, segment_id)
            actions.append(SendObject(
                pending.requester, record.object_id, segment_id, record.size, transfer, pending.max_frame_bytes
            ))

    def _answer_missing(self, object_id: bytes, reason: str, actions: list[Action]) -> None:
        for pending in self._pending.pop(object_id, []):
            actions.append(Reply(pending.requester, d.Missing(pending.requester.request_id, object_id, reason)))

    def _pin(self, reader: ReaderId, object_id: bytes, segment_id: int) -> None:
        self.segments[segment_id].pins += 1
        self._pins.setdefault(reader, {}).setdefault(object_id, []).append(segment_id)

    def _unpin(self, reader: ReaderId, object_id: bytes, now: float) -> None:
        by_object = self._pins.get(reader)
        if not by_object or object_id not in by_object:
            return  # a release we cannot match (sent twice, or after its process was reported gone)
        segment_ids = by_object[object_id]
        segment = self.segments[segment_ids.pop()]
        if not segment_ids:
            del by_object[object_id]
            if not by_object:
                del self._pins[reader]
        segment.pins -= 1
        if segment.pins == 0 and segment.use is SegmentUse.ORPHANED:
            self._to_pool(segment, now)
