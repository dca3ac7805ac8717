"""The store core's borrowed objects: lent by a local writer, their bytes left in its memory."""

from __future__ import annotations

from scaler.protocol import data_messages as d
from scaler.store import store_actions as a
from scaler.store import store_records as r
from tests.unit.test_store_core import MB, OTHER_PID, PID, ask, get_local, new_core, of, one, store_local

LOAN = d.MemoryLoan(PID, b"header", ((0x1000, 10), (0x2000, 50 * MB)), 0x3000, b"cookie")


def lend(core, object_id: bytes, size: int = 50 * MB, now: float = 0.0, loan: d.MemoryLoan = LOAN) -> list:
    return core.on_lend(ask(7), object_id, size, "arg", loan, now)


def test_a_lent_object_is_held_without_a_segment_and_a_local_reader_is_told_where_to_read_it() -> None:
    core = new_core(capacity=10 * MB)  # smaller than the object: a loan takes none of the capacity
    actions = lend(core, b"obj")
    assert one(a.Reply, actions).message == d.Stored(7, b"obj")
    assert not of(a.ReportHeld, actions) and core.held_objects() == ((b"obj", 50 * MB),)
    assert a.WatchProcess(PID) in actions  # its exit loses the object
    assert not of(a.CreateSegment, actions) and not of(a.SpillObject, actions)
    status = core.status()
    assert status.resident_bytes == 0 and status.held_bytes == 50 * MB and status.object_count == 1

    actions = get_local(core, b"obj", pid=OTHER_PID)
    assert one(a.Reply, actions).message == d.Borrowed(3, b"obj", 50 * MB, LOAN)
    assert not of(a.WatchProcess, actions)  # nothing pinned: nothing to take back from the reader
    assert core.status().pinned_bytes == 0


def test_a_remote_reader_gets_a_lent_object_read_by_the_store() -> None:
    core = new_core()
    lend(core, b"obj")
    actions = core.on_get(ask(3), b"obj", False, 0, 5.0, "", 0.0, max_frame_bytes=4 * MB)
    assert one(a.SendBorrowed, actions) == a.SendBorrowed(ask(3), b"obj", 50 * MB, LOAN, 4 * MB)


def test_a_get_waiting_for_an_object_is_answered_when_it_is_lent() -> None:
    core = new_core()
    assert get_local(core, b"obj", pid=OTHER_PID, wait=5.0) == []
    actions = lend(core, b"obj", now=1.0)
    assert d.Borrowed(3, b"obj", 50 * MB, LOAN) in [reply.message for reply in of(a.Reply, actions)]


def test_the_lenders_exit_loses_its_objects_and_answers_their_waiting_gets() -> None:
    core = new_core()
    lend(core, b"one")
    lend(core, b"two")
    store_local(core, b"sealed", 5000)  # written into a segment: the writer's exit changes nothing for it
    actions = core.on_process_gone(PID, 1.0)
    assert one(a.ReportLost, actions).object_ids in ((b"one", b"two"), (b"two", b"one"))
    reply = one(a.Reply, get_local(core, b"one", wait=0.0, now=2.0)).message
    assert isinstance(reply, d.Missing)
    assert b"sealed" in core.objects and core.status().object_count == 1


def test_a_loan_that_cannot_be_read_any_more_is_lost() -> None:
    core = new_core()
    lend(core, b"obj")
    actions = core.on_loan_broken(b"obj", "process 4242 no longer lends this object", 1.0)
    assert one(a.ReportLost, actions).object_ids == (b"obj",)
    assert a.UnwatchProcess(PID) in actions
    assert b"obj" not in core.objects
    assert core.on_loan_broken(b"obj", "again", 2.0) == []


def test_deleting_a_lent_object_forgets_it_and_stops_watching_a_lender_that_lent_nothing_else() -> None:
    core = new_core()
    lend(core, b"one")
    lend(core, b"two")
    assert a.UnwatchProcess(PID) not in core.on_delete([b"one"], 1.0)
    actions = core.on_delete([b"two"], 1.0)
    assert a.UnwatchProcess(PID) in actions and not of(a.ReportLost, actions)
    assert core.objects == {}
    # A loan that comes after its object's delete (an unawaited loan overtaken) is acknowledged and dropped.
    core.on_delete([b"three"], 2.0)
    assert one(a.Reply, lend(core, b"three", now=2.0)).message == d.Stored(7, b"three")
    assert b"three" not in core.objects


def test_a_second_copy_of_a_held_object_is_acknowledged_and_not_kept() -> None:
    core = new_core()
    store_local(core, b"obj", 5000)
    actions = lend(core, b"obj")
    assert one(a.Reply, actions).message == d.Stored(7, b"obj")
    assert core.objects[b"obj"].state is r.ObjectState.RESIDENT
    assert not of(a.WatchProcess, actions)


def test_bad_loans_are_failed_with_a_reason() -> None:
    core = new_core()
    assert isinstance(one(a.Reply, lend(core, b"", size=10)).message, d.Failed)
    assert isinstance(one(a.Reply, lend(core, b"obj", size=0)).message, d.Failed)
