"""The store core under random sequences of events, against a model of the shell that executes its actions.

The model keeps what the real shell and its peers would: which segments exist and which object each
one holds, the spill files, the mappings readers hold (pins, counted by the model itself from the
`located` and `object` answers it received), and every request with its deadline. After every step:
the accounting adds up; the store holds no more than its capacity while it could spill or drop
something; no segment that a reader maps (or a send reads) is written, recycled, spilled or freed;
every answer names a segment holding the right object; every waiting get is answered, exactly once,
by its deadline.
"""

from __future__ import annotations

from collections import Counter

import pytest
from fuzz_budget import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.store import store_actions as a
from scaler.store import store_core as c
from scaler.store import store_records as r

pytestmark = pytest.mark.timeout(300)

CAPACITY = 64 * 1024
OBJECT_IDS = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])
PIDS = st.sampled_from([101, 102, 103])
SIZES = st.sampled_from([1, 4096, 5000, 9000, 20_000, 40_000, 70_000])
WAITS = st.sampled_from([0.0, 0.5, 2.0])
OWN_ADDRESS = "tcp://me:1"
HOLDERS = st.sampled_from(["", OWN_ADDRESS, "tcp://other:1"])


class StoreMachine(RuleBasedStateMachine):
    @initialize(pool_idle=st.sampled_from([1.0, 100.0]))
    def start(self, pool_idle: float) -> None:
        self.core = c.StoreCore(r.StoreConfig(CAPACITY, own_address=OWN_ADDRESS, pool_idle_seconds=pool_idle))
        self.now = 0.0
        self.segments: dict[int, int] = {}  # alive segment id -> capacity
        self.content: dict[int, bytes] = {}  # segment id -> the object written into it
        self.spill_files: dict[bytes, bytes] = {}  # object id -> (the object id, standing for its bytes)
        self.pins: Counter[int] = Counter()
        self.mappings: dict[tuple[int, bytes], list[int]] = {}  # (pid, object id) -> mapped segments
        self.transfers: dict[int, int] = {}  # transfer -> segment
        self.lent: dict[int, int] = {}  # segment id -> pid it was granted to
        self.fetching: set[bytes] = set()
        self.waiting: dict[int, float] = {}  # request id -> deadline, for gets not answered yet
        self.answered: set[int] = set()
        self.next_request = 1
        self.fail_next_spill = False
        self.fail_next_read_back = False
        self.watched: set[int] = set()

    # ------------------------------------------------------------------------------------------ the shell

    def requester(self) -> a.Requester:
        request_id = self.next_request
        self.next_request += 1
        return a.Requester(b"peer", request_id)

    def answer(self, requester: a.Requester) -> None:
        assert requester.request_id not in self.answered, "a request is answered twice"
        self.answered.add(requester.request_id)
        self.waiting.pop(requester.request_id, None)

    def run(self, actions: list[a.Action], payload_of: bytes = b"", requester_pid: int = 0) -> None:
        follow_ups: list[a.Action] = []
        for action in actions:
            if isinstance(action, a.CreateSegment):
                assert action.segment_id not in self.segments
                self.segments[action.segment_id] = action.capacity
            elif isinstance(action, a.DestroySegment):
                assert self.pins[action.segment_id] == 0, "a mapped segment is freed"
                del self.segments[action.segment_id]
                self.content.pop(action.segment_id, None)
            elif isinstance(action, a.SpillObject):
                assert self.pins[action.segment_id] == 0, "a mapped segment is spilled"
                assert self.content[action.segment_id] == action.object_id
                if self.fail_next_spill:
                    self.fail_next_spill = False
                    capacity = self.segments[action.segment_id]
                    follow_ups += self.core.on_spill_failed(action.object_id, action.segment_id, capacity, self.now)
                else:
                    self.spill_files[action.object_id] = action.object_id
                    del self.segments[action.segment_id]
                    del self.content[action.segment_id]
            elif isinstance(action, a.ReadBack):
                assert self.pins[action.segment_id] == 0, "a mapped segment is overwritten"
                assert action.segment_id in self.segments
                data = self.spill_files.pop(action.object_id)
                if self.fail_next_read_back:
                    self.fail_next_read_back = False
                    follow_ups += self.core.on_read_back_done(action.object_id, False, "I/O error", self.now)
                else:
                    self.content[action.segment_id] = data
                    follow_ups += self.core.on_read_back_done(action.object_id, True, "", self.now)
            elif isinstance(action, a.DropSpill):
                self.spill_files.pop(action.object_id, None)
            elif isinstance(action, a.WritePayload):
                assert self.pins[action.segment_id] == 0, "a mapped segment is overwritten"
                assert action.segment_id in self.segments
                self.content[action.segment_id] = payload_of
            elif isinstance(action, a.Fetch):
                assert action.holder != OWN_ADDRESS
                self.fetching.add(action.object_id)
            elif isinstance(action, a.GrantSegment):
                assert self.pins[action.segment_id] == 0, "a mapped segment is lent to a writer"
                assert action.segment_id in self.segments
                self.content.pop(action.segment_id, None)
                self.lent[action.segment_id] = requester_pid
                self.answer(action.to)
            elif isinstance(action, a.Locate):
                assert self.content.get(action.segment_id) == action.object_id, "a reader maps the wrong bytes"
                self.pins[action.segment_id] += 1
                pid = self.core_pid_of(action.to)
                self.mappings.setdefault((pid, action.object_id), []).append(action.segment_id)
                self.answer(action.to)
            elif isinstance(action, a.SendObject):
                assert self.content.get(action.segment_id) == action.object_id, "a reader gets the wrong bytes"
                self.pins[action.segment_id] += 1
                self.transfers[action.transfer] = action.segment_id
                self.answer(action.to)
            elif isinstance(action, a.Reply):
                self.answer(action.to)
            elif isinstance(action, a.WatchProcess):
                self.watched.add(action.pid)
            elif isinstance(action, a.UnwatchProcess):
                self.watched.discard(action.pid)
        if follow_ups:
            self.run(follow_ups)

    def core_pid_of(self, requester: a.Requester) -> int:
        return self.get_pids[requester.request_id]

    # ------------------------------------------------------------------------------------------ events

    @rule(pid=PIDS, size=SIZES)
    def allocate(self, pid: int, size: int) -> None:
        self.run(self.core.on_allocate(self.requester(), size, pid, self.now), requester_pid=pid)

    @precondition(lambda self: self.lent)
    @rule(data=st.data(), object_id=OBJECT_IDS, honest=st.booleans())
    def seal(self, data: st.DataObject, object_id: bytes, honest: bool) -> None:
        segment_id = data.draw(st.sampled_from(sorted(self.lent)))
        pid = self.lent[segment_id] if honest else 999
        size = data.draw(st.integers(1, self.segments[segment_id]))
        if honest:
            self.content[segment_id] = object_id  # the writer writes, then seals
        actions = self.core.on_seal(self.requester(), segment_id, object_id, size, "", pid, self.now)
        if honest:
            del self.lent[segment_id]
        self.run(actions)

    @rule(object_id=OBJECT_IDS, size=SIZES)
    def put(self, object_id: bytes, size: int) -> None:
        self.run(self.core.on_put(self.requester(), object_id, size, "", self.now), payload_of=object_id)

    @rule(object_id=OBJECT_IDS, local=st.booleans(), pid=PIDS, wait=WAITS, holder=HOLDERS)
    def get(self, object_id: bytes, local: bool, pid: int, wait: float, holder: str) -> None:
        requester = self.requester()
        self.get_pids[requester.request_id] = pid
        self.waiting[requester.request_id] = self.now + wait
        self.run(self.core.on_get(requester, object_id, local, pid, wait, holder, self.now))

    @property
    def get_pids(self) -> dict[int, int]:
        if not hasattr(self, "_get_pids"):
            self._get_pids: dict[int, int] = {}
        return self._get_pids

    @precondition(lambda self: self.mappings)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        pid, object_id = data.draw(st.sampled_from(sorted(self.mappings)))
        segments = self.mappings[(pid, object_id)]
        self.pins[segments.pop()] -= 1
        if not segments:
            del self.mappings[(pid, object_id)]
        self.run(self.core.on_release(pid, [object_id], self.now))

    @rule(pid=PIDS, object_id=OBJECT_IDS)
    def release_something_not_mapped(self, pid: int, object_id: bytes) -> None:
        if (pid, object_id) not in self.mappings:
            self.run(self.core.on_release(pid, [object_id], self.now))

    @rule(pid=PIDS)
    def process_gone(self, pid: int) -> None:
        for (owner, object_id), segments in list(self.mappings.items()):
            if owner == pid:
                for segment_id in segments:
                    self.pins[segment_id] -= 1
                del self.mappings[(owner, object_id)]
        for segment_id, owner in list(self.lent.items()):
            if owner == pid:
                del self.lent[segment_id]
        self.run(self.core.on_process_gone(pid, self.now))

    @precondition(lambda self: self.transfers)
    @rule(data=st.data())
    def transfer_done(self, data: st.DataObject) -> None:
        transfer = data.draw(st.sampled_from(sorted(self.transfers)))
        self.pins[self.transfers.pop(transfer)] -= 1
        self.run(self.core.on_transfer_done(transfer, self.now))

    @precondition(lambda self: self.fetching)
    @rule(data=st.data(), size=SIZES, ok=st.booleans())
    def fetch_answered(self, data: st.DataObject, size: int, ok: bool) -> None:
        object_id = data.draw(st.sampled_from(sorted(self.fetching)))
        self.fetching.discard(object_id)
        if ok:
            self.run(self.core.on_fetched(object_id, size, self.now), payload_of=object_id)
        else:
            self.run(self.core.on_fetch_failed(object_id, "unreachable", self.now))

    @rule(object_ids=st.lists(OBJECT_IDS, max_size=3))
    def delete(self, object_ids: list[bytes]) -> None:
        self.run(self.core.on_delete(object_ids, self.now))

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 3.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.run(self.core.on_tick(self.now))
        overdue = {request for request, deadline in self.waiting.items() if deadline <= self.now}
        assert not overdue, f"gets not answered by their deadline: {overdue}"

    @rule()
    def spill_directory_fails_once(self) -> None:
        self.fail_next_spill = True

    @rule()
    def spill_file_unreadable_once(self) -> None:
        self.fail_next_read_back = True

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def accounting_adds_up(self) -> None:
        if not hasattr(self, "core"):
            return
        status = self.core.status()
        assert self.core.resident_bytes == sum(self.segments.values())
        assert set(self.core.segments) == set(self.segments)
        by_use = Counter()
        for segment in self.core.segments.values():
            by_use[segment.use] += segment.capacity
            assert segment.pins == self.pins[segment.segment_id], "the core's pins differ from the readers'"
        assert status.resident_bytes == sum(by_use.values())
        assert status.pooled_bytes == by_use[r.SegmentUse.POOLED]
        assert status.lent_bytes == by_use[r.SegmentUse.LENT]
        assert status.spilled_bytes == sum(
            record.size for record in self.core.objects.values() if record.state is r.ObjectState.SPILLED
        )
        assert set(self.spill_files) == {
            object_id for object_id, record in self.core.objects.items() if record.state is r.ObjectState.SPILLED
        }

    @invariant()
    def resident_objects_are_in_their_segments(self) -> None:
        if not hasattr(self, "core"):
            return
        for object_id, record in self.core.objects.items():
            if record.state is r.ObjectState.RESIDENT:
                assert record.segment_id is not None
                assert self.content.get(record.segment_id) == object_id

    @invariant()
    def never_over_capacity_while_something_could_be_freed(self) -> None:
        if not hasattr(self, "core") or self.core.spilling_rests(self.now):
            return
        if self.core.resident_bytes > CAPACITY:
            assert not self.core.pooled_segment_ids(), "over capacity with pooled segments"
            assert not self.core.spillable(), "over capacity with unpinned objects in memory"

    @invariant()
    def the_waiting_gets_are_the_cores(self) -> None:
        if not hasattr(self, "core"):
            return
        assert self.core.status().waiting_gets == len(self.waiting)


StoreMachine.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=60, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_store_core_state_machine = StoreMachine.TestCase
