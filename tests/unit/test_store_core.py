"""The store's decisions (scaler/store/store_core.py), event by event, without any I/O."""

from __future__ import annotations

from scaler.protocol import data_messages as d
from scaler.store import store_actions as a
from scaler.store import store_core as c
from scaler.store import store_records as r
from scaler.store.recent_deletes import REMEMBERED_SECONDS
from scaler.store.segment import PAGE_BYTES
from scaler.store.segment_space import SPARE_MIN_BYTES

PID = 4242
OTHER_PID = 4343
MB = 1 << 20


def ask(request_id: int) -> a.Requester:
    return a.Requester(b"peer", request_id)


def of(kind: type, actions: list) -> list:
    return [action for action in actions if isinstance(action, kind)]


def one(kind: type, actions: list):
    found = of(kind, actions)
    assert len(found) == 1, (kind.__name__, actions)
    return found[0]


def new_core(capacity: int = 100 * MB, pool_idle_seconds: float = 30.0) -> c.StoreCore:
    return c.StoreCore(r.StoreConfig(capacity, own_address="tcp://me:1", pool_idle_seconds=pool_idle_seconds))


def store_local(core: c.StoreCore, object_id: bytes, size: int, now: float = 0.0, pid: int = PID) -> int:
    """Allocate and seal, as a local writer does; returns the segment id."""
    granted = one(a.GrantSegment, core.on_allocate(ask(1), size, pid, now))
    actions = core.on_seal(ask(2), granted.segment_id, object_id, size, "", pid, now)
    assert one(a.Reply, actions).message == d.Stored(2, object_id)
    return granted.segment_id


def get_local(core: c.StoreCore, object_id: bytes, now: float = 0.0, pid: int = PID, wait: float = 5.0) -> list:
    return core.on_get(ask(3), object_id, True, pid, wait, "", now)


# ---------------------------------------------------------------------------------------------- put and get


def test_a_local_writer_gets_a_segment_seals_it_and_a_reader_maps_it() -> None:
    core = new_core()
    actions = core.on_allocate(ask(1), 10_000, PID, 0.0)
    created = one(a.CreateSegment, actions)
    assert created.capacity == 3 * PAGE_BYTES  # whole pages
    assert one(a.GrantSegment, actions) == a.GrantSegment(ask(1), created.segment_id, 10_000)
    assert a.WatchProcess(PID) in actions  # it borrowed a segment: its death must return it

    actions = core.on_seal(ask(2), created.segment_id, b"obj", 10_000, "name", PID, 0.0)
    # Its writer names it to the scheduler (a client's submitTasks, a worker's result): the store does not.
    assert not of(a.ReportHeld, actions)
    assert core.held_objects() == ((b"obj", 10_000),)
    assert a.UnwatchProcess(PID) in actions

    actions = get_local(core, b"obj", pid=OTHER_PID)
    assert one(a.Locate, actions) == a.Locate(ask(3), b"obj", created.segment_id, 10_000)
    assert a.WatchProcess(OTHER_PID) in actions
    assert core.status().pinned_bytes == created.capacity

    assert core.on_release(OTHER_PID, [b"obj"], 1.0) == [a.UnwatchProcess(OTHER_PID)]
    assert core.status().pinned_bytes == 0


def test_a_remote_put_is_written_into_a_segment_and_a_remote_get_pins_it_while_it_is_sent() -> None:
    core = new_core()
    actions = core.on_put(ask(1), b"obj", 5000, "", 0.0)
    created = one(a.CreateSegment, actions)
    assert one(a.WritePayload, actions) == a.WritePayload(created.segment_id, 5000)
    assert one(a.Reply, actions).message == d.Stored(1, b"obj")
    assert actions.index(one(a.WritePayload, actions)) < actions.index(one(a.Reply, actions))

    send = one(a.SendObject, core.on_get(ask(2), b"obj", False, 0, 0.0, "", 0.0))
    assert (send.segment_id, send.size) == (created.segment_id, 5000)
    assert core.status().pinned_bytes == created.capacity
    core.on_transfer_done(send.transfer, 1.0)
    assert core.status().pinned_bytes == 0


def test_a_second_copy_of_an_object_is_acknowledged_and_its_segment_pooled() -> None:
    core = new_core()
    first = store_local(core, b"obj", 5000)
    second = store_local(core, b"obj", 5000)
    assert second != first
    assert core.pooled_segment_ids() == [second]
    assert one(a.Locate, get_local(core, b"obj")).segment_id == first
    assert one(a.Reply, core.on_put(ask(9), b"obj", 5000, "", 0.0)).message == d.Stored(9, b"obj")


# ---------------------------------------------------------------------------------------------- recycling


def test_the_segment_of_a_deleted_object_is_recycled_for_the_next_object_of_its_size() -> None:
    core = new_core()
    segment_id = store_local(core, b"first", 50 * MB)
    assert core.on_delete([b"first"], 1.0) == []
    assert core.status().pooled_bytes == 100 * MB  # its segment, and the spare made with it
    actions = core.on_allocate(ask(5), 50 * MB - 100, PID, 2.0)
    assert not of(a.CreateSegment, actions)  # recycled: its pages are already faulted in (a spare is left)
    assert one(a.GrantSegment, actions).segment_id == segment_id
    # Much smaller objects do not take a big pooled segment.
    core.on_seal(ask(6), segment_id, b"second", 50 * MB - 100, "", PID, 2.0)
    core.on_delete([b"second"], 3.0)
    assert of(a.CreateSegment, core.on_allocate(ask(7), MB, PID, 4.0))


def test_a_large_segment_is_made_with_a_spare_whose_pages_are_made_off_the_writers_path() -> None:
    core = new_core(capacity=175 * MB)
    actions = core.on_allocate(ask(1), 50 * MB, PID, 0.0)
    granted = one(a.GrantSegment, actions).segment_id
    created = of(a.CreateSegment, actions)
    assert [(segment.segment_id == granted, segment.prefault) for segment in created] == [(True, False), (False, True)]
    assert actions.index(one(a.GrantSegment, actions)) < actions.index(created[1])  # the writer is not kept waiting
    # The next writer of that size gets the spare, and another spare is made while it writes.
    actions = core.on_allocate(ask(2), 50 * MB, PID, 0.1)
    assert one(a.GrantSegment, actions).segment_id == created[1].segment_id
    assert [segment.prefault for segment in of(a.CreateSegment, actions)] == [True]
    # No spare beyond the capacity (three granted: a fourth 50 MB would not fit 175 MB), and none for small objects.
    actions = core.on_allocate(ask(3), 50 * MB, PID, 0.2)
    assert one(a.GrantSegment, actions) and not of(a.CreateSegment, actions)
    assert core.status().lent_bytes == core.status().resident_bytes == 150 * MB
    small = core.on_allocate(ask(4), SPARE_MIN_BYTES // 2, PID, 0.3)
    assert [segment.prefault for segment in of(a.CreateSegment, small)] == [False]


def test_a_write_that_comes_after_the_delete_of_its_object_is_dropped_not_kept_forever() -> None:
    # A worker writes a result only when asked (worker/own_results.py): the scheduler's delete of the
    # freed result may reach the store first. Nobody would ever delete what that late write leaves.
    core = new_core()
    assert core.on_delete([b"late"], 1.0) == []
    granted = one(a.GrantSegment, core.on_allocate(ask(1), 5000, PID, 2.0))
    actions = core.on_seal(ask(2), granted.segment_id, b"late", 5000, "", PID, 2.0)
    assert one(a.Reply, actions).message == d.Stored(2, b"late")  # the writer has nothing to do about it
    assert not of(a.ReportHeld, actions)
    assert core.status().object_count == 0 and core.pooled_segment_ids() == [granted.segment_id]

    # Long after the delete the id is forgotten: an object of that id is kept again.
    core.on_tick(2.0 + REMEMBERED_SECONDS)
    store_local(core, b"late", 5000, now=3.0 + REMEMBERED_SECONDS)
    assert core.status().object_count == 1


def test_a_segment_mapped_by_a_reader_is_recycled_only_after_the_reader_releases_it() -> None:
    core = new_core()
    segment_id = store_local(core, b"obj", 5000)
    get_local(core, b"obj", pid=OTHER_PID)
    core.on_delete([b"obj"], 1.0)
    assert core.pooled_segment_ids() == []
    assert one(a.Reply, get_local(core, b"obj", wait=0.0)).message.reason == "not held by this store"
    assert of(a.CreateSegment, core.on_allocate(ask(8), 5000, PID, 1.0))  # not the mapped one

    core.on_release(OTHER_PID, [b"obj"], 2.0)
    assert core.pooled_segment_ids() == [segment_id]


def test_a_reader_that_dies_releases_its_pins_and_a_writer_that_dies_its_segments() -> None:
    core = new_core()
    store_local(core, b"obj", 5000)
    get_local(core, b"obj", pid=OTHER_PID)
    get_local(core, b"obj", pid=OTHER_PID)  # mapped twice
    lent = one(a.GrantSegment, core.on_allocate(ask(4), 9000, PID, 0.0)).segment_id
    core.on_delete([b"obj"], 1.0)

    core.on_process_gone(OTHER_PID, 2.0)
    core.on_process_gone(PID, 2.0)
    status = core.status()
    assert status.pinned_bytes == 0 and status.lent_bytes == 0
    assert sorted(core.pooled_segment_ids()) == sorted([lent, 1])
    # The dead writer's segment cannot be sealed any more.
    assert isinstance(one(a.Reply, core.on_seal(ask(5), lent, b"x", 10, "", PID, 3.0)).message, d.Failed)


def test_pooled_segments_idle_too_long_are_freed() -> None:
    core = new_core(pool_idle_seconds=10.0)
    segment_id = store_local(core, b"obj", 5000)
    core.on_delete([b"obj"], 1.0)
    assert core.next_deadline() == 11.0
    assert core.on_tick(10.9) == []
    assert core.on_tick(11.0) == [a.DestroySegment(segment_id)]
    assert core.status().resident_bytes == 0


# ---------------------------------------------------------------------------------------------- capacity


def test_beyond_capacity_the_least_recently_used_object_is_spilled_and_read_back_on_a_get() -> None:
    core = new_core(capacity=10 * MB)
    store_local(core, b"a", 4 * MB, now=1.0)
    store_local(core, b"b", 4 * MB, now=2.0)
    get_local(core, b"a", now=3.0)  # a is now the more recently used one (and mapped)
    core.on_release(PID, [b"a"], 3.5)

    granted = core.on_allocate(ask(1), 4 * MB, PID, 4.0)
    spill = one(a.SpillObject, granted)
    assert (spill.object_id, spill.size) == (b"b", 4 * MB)
    assert granted.index(spill) < granted.index(one(a.CreateSegment, granted))  # room first
    core.on_seal(ask(2), one(a.GrantSegment, granted).segment_id, b"c", 4 * MB, "", PID, 4.0)
    status = core.status()
    assert (status.spilled_bytes, status.held_bytes, status.resident_bytes) == (4 * MB, 12 * MB, 8 * MB)

    actions = get_local(core, b"b", now=5.0)
    read_back = one(a.ReadBack, actions)
    assert one(a.SpillObject, actions).object_id == b"a"  # the least recently used of a and c
    assert not of(a.Locate, actions)  # answered once the bytes are back
    located = one(a.Locate, core.on_read_back_done(b"b", True, "", 5.0))
    assert located.segment_id == read_back.segment_id
    assert core.status().resident_bytes <= 10 * MB


def test_objects_mapped_by_readers_are_never_spilled_so_the_store_goes_over_capacity_until_released() -> None:
    core = new_core(capacity=10 * MB)
    store_local(core, b"a", 6 * MB)
    get_local(core, b"a")
    store_local(core, b"b", 6 * MB)
    get_local(core, b"b")
    status = core.status()
    assert status.resident_bytes == 12 * MB and status.spilled_bytes == 0
    actions = core.on_release(PID, [b"a"], 1.0)
    assert one(a.SpillObject, actions).object_id == b"a"
    assert core.status().resident_bytes == 6 * MB


def test_pooled_segments_are_dropped_before_any_object_is_spilled() -> None:
    core = new_core(capacity=10 * MB)
    store_local(core, b"a", 4 * MB)
    pooled = store_local(core, b"b", 4 * MB)
    core.on_delete([b"b"], 1.0)
    actions = core.on_allocate(ask(1), 5 * MB, PID, 2.0)
    assert a.DestroySegment(pooled) in actions
    assert not of(a.SpillObject, actions)


def test_when_the_spill_directory_fails_the_object_stays_and_spilling_rests() -> None:
    core = new_core(capacity=10 * MB)
    store_local(core, b"a", 6 * MB)
    actions = core.on_put(ask(1), b"b", 6 * MB, "", 1.0)
    spill = one(a.SpillObject, actions)
    assert core.on_spill_failed(spill.object_id, spill.segment_id, 6 * MB, 1.0) == []
    assert core.status().resident_bytes == 12 * MB and core.status().spilled_bytes == 0
    assert one(a.Locate, get_local(core, b"a", now=1.5)).segment_id == spill.segment_id
    core.on_release(PID, [b"a"], 1.5)  # a is now the most recently used
    assert not of(a.SpillObject, core.on_put(ask(2), b"c", 1, "", 2.0))
    assert one(a.SpillObject, core.on_put(ask(3), b"d", 1, "", 1.0 + c.SPILL_RETRY_SECONDS)).object_id == b"b"


def test_an_unreadable_spill_file_loses_the_object_and_says_so() -> None:
    core = new_core(capacity=4 * MB)
    store_local(core, b"a", 3 * MB)
    store_local(core, b"b", 3 * MB)
    actions = get_local(core, b"a")
    one(a.ReadBack, actions)
    actions = core.on_read_back_done(b"a", False, "I/O error", 1.0)
    assert "I/O error" in one(a.Reply, actions).message.reason
    assert one(a.ReportLost, actions).object_ids == (b"a",)
    assert one(a.Reply, get_local(core, b"a", now=2.0, wait=0.0)).message.reason == "not held by this store"


def test_deleting_a_spilled_object_drops_its_file() -> None:
    core = new_core(capacity=4 * MB)
    store_local(core, b"a", 3 * MB)
    store_local(core, b"b", 3 * MB)
    assert core.on_delete([b"a"], 1.0) == [a.DropSpill(b"a")]
    assert core.status().spilled_bytes == 0


# ---------------------------------------------------------------------------------------------- waiting


def test_a_get_waits_for_an_object_being_put_and_is_answered_when_it_arrives() -> None:
    core = new_core()
    assert get_local(core, b"later", now=0.0) == []
    assert core.next_deadline() == 5.0
    locate = one(a.Locate, core.on_put(ask(2), b"later", 5000, "", 1.0))
    assert locate.to == ask(3)


def test_a_get_that_is_not_answered_in_time_gets_missing_at_its_deadline() -> None:
    core = new_core()
    get_local(core, b"never", now=0.0)
    assert core.on_tick(4.9) == []
    assert core.on_tick(5.0) == [a.Reply(ask(3), d.Missing(3, b"never", "not here in time"))]
    assert core.next_deadline() is None


def test_a_get_without_wait_for_an_unknown_object_is_missing_at_once() -> None:
    core = new_core()
    actions = core.on_get(ask(1), b"nope", False, 0, 0.0, "", 0.0)
    assert actions == [a.Reply(ask(1), d.Missing(1, b"nope", "not held by this store"))]


def test_a_get_naming_another_holder_fetches_once_and_answers_every_waiting_reader() -> None:
    core = new_core()
    fetch = one(a.Fetch, core.on_get(ask(1), b"far", True, PID, 5.0, "tcp://there:1", 0.0))
    assert fetch == a.Fetch(b"far", "tcp://there:1", 5000)
    assert core.on_get(ask(2), b"far", False, 0, 5.0, "tcp://there:1", 0.1) == []  # no second fetch
    actions = core.on_fetched(b"far", 7000, 1.0)
    write = one(a.WritePayload, actions)
    assert one(a.Locate, actions).segment_id == write.segment_id
    assert one(a.SendObject, actions).to == ask(2)
    assert one(a.ReportHeld, actions).objects == ((b"far", 7000),)  # a second holder, for the scheduler


def test_a_failed_fetch_answers_the_waiting_readers_with_the_reason() -> None:
    core = new_core()
    core.on_get(ask(1), b"far", True, PID, 5.0, "tcp://there:1", 0.0)
    actions = core.on_fetch_failed(b"far", "the holder does not answer", 1.0)
    assert actions == [a.Reply(ask(1), d.Missing(1, b"far", "fetch failed: the holder does not answer"))]


def test_a_fetch_nobody_waits_for_any_more_is_abandoned_and_its_late_answer_ignored() -> None:
    core = new_core()
    core.on_get(ask(1), b"far", True, PID, 5.0, "tcp://there:1", 0.0)
    assert one(a.Reply, core.on_tick(5.0)).message.reason == "still being fetched"
    assert core.on_fetched(b"far", 7000, 6.0) == []
    assert core.status().object_count == 0


def test_a_get_naming_this_store_as_holder_does_not_fetch_from_itself() -> None:
    core = new_core()
    actions = core.on_get(ask(1), b"x", False, 0, 0.0, "tcp://me:1", 0.0)
    assert one(a.Reply, actions).message.reason == "not held by this store"


def test_deleting_an_object_answers_its_waiting_gets() -> None:
    core = new_core()
    core.on_get(ask(1), b"far", True, PID, 5.0, "tcp://there:1", 0.0)
    assert core.on_delete([b"far"], 1.0) == [a.Reply(ask(1), d.Missing(1, b"far", "deleted"))]


# ---------------------------------------------------------------------------------------------- bad requests


def test_bad_requests_are_failed_with_a_reason() -> None:
    core = new_core()
    assert isinstance(one(a.Reply, core.on_allocate(ask(1), 100, 0, 0.0)).message, d.Failed)
    assert isinstance(one(a.Reply, core.on_allocate(ask(1), 0, PID, 0.0)).message, d.Failed)
    assert isinstance(one(a.Reply, core.on_seal(ask(1), None, b"x", 10, "", PID, 0.0)).message, d.Failed)
    assert isinstance(one(a.Reply, core.on_get(ask(1), b"x", True, 0, 1.0, "", 0.0)).message, d.Failed)
    segment_id = one(a.GrantSegment, core.on_allocate(ask(2), 100, PID, 0.0)).segment_id
    failed = one(a.Reply, core.on_seal(ask(3), segment_id, b"x", 100, "", OTHER_PID, 0.0)).message
    assert "not allocated to this process" in failed.reason
    failed = one(a.Reply, core.on_seal(ask(4), segment_id, b"x", 10 * PAGE_BYTES, "", PID, 0.0)).message
    assert "do not fit" in failed.reason
    assert isinstance(one(a.Reply, core.on_put(ask(5), b"", 10, "", 0.0)).message, d.Failed)


def test_a_release_that_matches_no_mapping_changes_nothing() -> None:
    core = new_core()
    store_local(core, b"obj", 5000)
    get_local(core, b"obj")
    assert core.on_release(OTHER_PID, [b"obj", b"unknown"], 1.0) == []
    assert core.status().pinned_bytes == PAGE_BYTES * 2
