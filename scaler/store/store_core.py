"""The store's decisions, as a state machine: events in (each with `now`), actions out; no I/O, no clock.

The store holds objects in shared-memory segments (segment_space.py counts and recycles them). This core
decides which objects it borrows instead (their bytes stay in the memory of the local writer that lent
them until it exits or the object is deleted: borrowed_memory.py; they take no capacity and never spill),
which objects go to disk when the resident bytes pass the capacity (least recently used first, never one
that a reader has mapped), when a waiting `get` is answered (pending_gets.py), and when a segment may be
reused: only once no reader has it mapped. It tells the scheduler of copies it fetched and of objects it
lost (ReportHeld, ReportLost).

The I/O shell (server.py) owns the real segments, spill files and sockets, executes the actions in the
order given, and reports back what it was asked to report (`on_read_back_done`, `on_fetched`, ...).
Readers are processes (pinning what they map) or transfers (a send in flight, pinning what zmq reads).
"""

from __future__ import annotations

from collections import OrderedDict

from scaler.protocol import data_messages as d
from scaler.store.local_ties import LocalTies
from scaler.store.pending_gets import PendingGets
from scaler.store.recent_deletes import RecentDeletes
from scaler.store.segment import capacity_for
from scaler.store.segment_space import SegmentSpace
from scaler.store.store_actions import (
    Action,
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


class StoreCore:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.space = SegmentSpace(config.capacity_bytes, config.pool_idle_seconds)
        self.segments = self.space.segments
        self.objects: dict[bytes, ObjectRecord] = {}
        self._next_transfer = 1
        self._lru: OrderedDict[bytes, None] = OrderedDict()  # resident objects, least recently used first
        self._ties = LocalTies()
        self._pending = PendingGets()
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
        if not self._ties.ties(pid):
            actions.append(WatchProcess(pid))
        self._ties.lend_segment(pid)
        actions.append(GrantSegment(requester, segment.segment_id, size))
        self.space.keep_a_spare(segment.capacity, now, actions)
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
        self._ties.segment_sealed(pid)
        self._unwatch_if_untied(pid, actions)
        existing = self.objects.get(object_id)
        if (existing is not None and existing.state is not ObjectState.FETCHING) or object_id in self._deleted_unheld:
            self.space.to_pool(segment, now)  # a second copy of an object we hold, or one deleted already
        else:
            segment.use = SegmentUse.HOLDS
            self._make_resident(object_id, size, name, segment, now, actions)
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
            if not self._ties.ties(loan.pid):
                actions.append(WatchProcess(loan.pid))
            self._ties.borrow(loan.pid, object_id)
            record = ObjectRecord(object_id, size, ObjectState.BORROWED, name, loan=loan)
            self.objects[object_id] = record
            self._answer_waiting(record, actions)
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
            self._pending.add(pending)
        elif record.state is ObjectState.RESIDENT or record.state is ObjectState.BORROWED:
            self._answer(pending, record, actions)
        elif record.state is ObjectState.SPILLED:
            self._pending.add(pending)
            self._start_read_back(record, now, actions)
        else:  # being read back or fetched
            self._pending.add(pending)
        self._enforce_capacity(now, actions)
        return actions

    def on_release(self, pid: int, object_ids: list[bytes], now: float) -> list[Action]:
        """A local reader unmapped these objects (one mapping each; an id twice for two mappings)."""
        actions: list[Action] = []
        held_before = self._ties.ties(pid)
        reader = process_reader(pid)
        for object_id in object_ids:
            self._unpin(reader, object_id, now)
        if held_before and not self._ties.ties(pid):
            actions.append(UnwatchProcess(pid))
        self._enforce_capacity(now, actions)
        return actions

    def on_process_gone(self, pid: int, now: float) -> list[Action]:
        """A local process exited: its mappings are gone, and so is whatever it was writing."""
        actions: list[Action] = []
        reader = process_reader(pid)
        for object_id, count in self._ties.pinned_by(reader):
            for _ in range(count):
                self._unpin(reader, object_id, now)
        for segment in list(self.segments.values()):
            if segment.use is SegmentUse.LENT and segment.lent_to == pid:
                self.space.to_pool(segment, now)
        lost = [self.objects[object_id] for object_id in self._ties.writer_gone(pid)]
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
        for object_id, _ in self._ties.pinned_by(reader):
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
        # Its writer named the first copy to the scheduler; this one only the store can tell of.
        actions.append(ReportHeld(((object_id, size),)))
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
        self.space.add(segment)
        if record is None or record.state is not ObjectState.SPILLED:
            self.space.to_pool(segment, now)  # deleted meanwhile
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
            self.space.to_pool(segment, now)
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
                self.space.to_pool(segment, now)
        self._enforce_capacity(now, actions)
        return actions

    def on_tick(self, now: float) -> list[Action]:
        """Answer the gets whose wait is over; free segments pooled for too long; spill if spilling rested."""
        actions: list[Action] = []
        for object_id, expired, none_left in self._pending.expire(now):
            for get in expired:
                reason = "not here in time" if object_id not in self.objects else "still being fetched"
                actions.append(Reply(get.requester, d.Missing(get.requester.request_id, object_id, reason)))
            record = self.objects.get(object_id)
            if none_left and record is not None and record.state is ObjectState.FETCHING:
                del self.objects[object_id]  # nobody waits any more: the late answer is ignored
        self._deleted_unheld.expire(now)
        self.space.free_idle(now, actions)
        self._enforce_capacity(now, actions)
        return actions

    # ------------------------------------------------------------------------------------------ views

    def next_deadline(self) -> float | None:
        """When on_tick next has something to do (a wait ends, a pooled segment idles out), if ever."""
        deadlines = self._pending.deadlines()
        idle_deadline = self.space.next_idle_deadline()
        if idle_deadline is not None:
            deadlines.append(idle_deadline)
        return min(deadlines) if deadlines else None

    @property
    def resident_bytes(self) -> int:
        return self.space.resident_bytes

    def held_objects(self) -> tuple[tuple[bytes, int], ...]:
        """Every object this store has (object id, size): in memory, on disk or borrowed."""
        return tuple(
            (record.object_id, record.size) for record in self.objects.values()
            if record.state is not ObjectState.FETCHING
        )

    def status(self) -> StoreStatus:
        return StoreStatus.of(
            self.config.capacity_bytes, self.resident_bytes, self.objects.values(), self.segments.values(),
            len(self._pending),
        )

    def spillable(self) -> list[bytes]:
        """Resident objects that may go to disk now (nobody has them mapped), least recently used first."""
        return [object_id for object_id in self._lru if not self._segment_of(object_id).pins]

    def pooled_segment_ids(self) -> list[int]:
        return self.space.pooled_segment_ids()

    def spilling_rests(self, now: float) -> bool:
        return now < self._spill_resumes_at

    # ------------------------------------------------------------------------------------------ internals

    def _unwatch_if_untied(self, pid: int, actions: list[Action]) -> None:
        if not self._ties.ties(pid):
            actions.append(UnwatchProcess(pid))

    def _drop_borrowed(self, record: ObjectRecord, actions: list[Action]) -> None:
        """Forget a borrowed object that is lost."""
        del self.objects[record.object_id]
        self._forget_lender_of(record, actions)

    def _forget_lender_of(self, record: ObjectRecord, actions: list[Action]) -> None:
        """A borrowed object is gone from `objects`: stop watching its lender if that was all that tied it."""
        assert record.loan is not None
        self._ties.unborrow(record.loan.pid, record.object_id)
        self._unwatch_if_untied(record.loan.pid, actions)

    @staticmethod
    def _failed(requester: Requester, reason: str) -> Reply:
        return Reply(requester, d.Failed(requester.request_id, reason))

    def _segment_of(self, object_id: bytes) -> SegmentRecord:
        segment_id = self.objects[object_id].segment_id
        assert segment_id is not None
        return self.segments[segment_id]

    def _take_segment(self, size: int, now: float, actions: list[Action]) -> SegmentRecord:
        """A segment for `size` bytes: a pooled one that fits, else a new one (making room for it first)."""
        segment = self.space.pooled(size)
        if segment is not None:
            return segment
        self._make_room(capacity_for(size), now, actions)
        return self.space.new(size, actions)

    def _make_room(self, extra: int, now: float, actions: list[Action]) -> None:
        """Free memory until `extra` more bytes fit the capacity: pooled segments first, then LRU spilling."""
        while self.space.resident_bytes + extra > self.config.capacity_bytes:
            if self.space.destroy_oldest_pooled(actions):
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
            self.space.forget(segment)
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

    def _make_resident(
        self, object_id: bytes, size: int, name: str, segment: SegmentRecord, now: float, actions: list[Action]
    ) -> None:
        segment.object_id = object_id
        record = ObjectRecord(object_id, size, ObjectState.RESIDENT, name, segment.segment_id)
        self.objects[object_id] = record
        self._lru[object_id] = None
        self._answer_waiting(record, actions)

    def _answer_waiting(self, record: ObjectRecord, actions: list[Action]) -> None:
        for pending in self._pending.take(record.object_id):
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
            if not self._ties.ties(pending.pid):
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
        for pending in self._pending.take(object_id):
            actions.append(Reply(pending.requester, d.Missing(pending.requester.request_id, object_id, reason)))

    def _pin(self, reader: ReaderId, object_id: bytes, segment_id: int) -> None:
        self.segments[segment_id].pins += 1
        self._ties.pin(reader, object_id, segment_id)

    def _unpin(self, reader: ReaderId, object_id: bytes, now: float) -> None:
        segment_id = self._ties.unpin(reader, object_id)
        if segment_id is None:
            return
        segment = self.segments[segment_id]
        segment.pins -= 1
        if segment.pins == 0 and segment.use is SegmentUse.ORPHANED:
            self.space.to_pool(segment, now)
