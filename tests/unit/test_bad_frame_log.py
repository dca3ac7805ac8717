"""Which drops of bad frames the scheduler logs: the first per sender per interval, then a count."""

from __future__ import annotations

import pytest

from scaler.utility.bad_frame_log import BadFrameLog, short_identity

pytestmark = pytest.mark.timeout(30)


def test_one_line_per_sender_per_interval_then_how_many_more() -> None:
    log = BadFrameLog(interval_seconds=10)
    first = log.on_dropped(b"C|host|1|ab", "an undecodable message (bad)", now=100.0)
    assert first == [
        "Scheduler: dropped an undecodable message (bad) from C|host|1|ab; "
        "more from it in the next 10s are counted, not logged"
    ]
    for offset in range(15):
        assert log.on_dropped(b"C|host|1|ab", "an undecodable message (bad)", now=100.0 + offset * 0.1) == []
    assert log.on_tick(now=109.9) == []
    assert log.on_tick(now=110.0) == [
        "Scheduler: dropped 15 more bad frame(s) from C|host|1|ab in the 10s after the first"
    ]
    assert log.on_tick(now=120.0) == []
    # The interval is over: the next drop is logged again.
    assert len(log.on_dropped(b"C|host|1|ab", "an undecodable message (bad)", now=130.0)) == 1


def test_a_sender_that_stops_after_its_first_frame_gets_no_summary() -> None:
    log = BadFrameLog(interval_seconds=10)
    assert len(log.on_dropped(b"once", "x", now=0.0)) == 1
    assert log.on_tick(now=50.0) == []


def test_each_sender_has_its_own_interval() -> None:
    log = BadFrameLog(interval_seconds=10)
    assert len(log.on_dropped(b"one", "x", now=0.0)) == 1
    assert len(log.on_dropped(b"two", "x", now=1.0)) == 1
    assert log.on_dropped(b"one", "x", now=2.0) == []


def test_a_drop_after_the_interval_but_before_a_tick_reports_the_count_and_logs_again() -> None:
    log = BadFrameLog(interval_seconds=10)
    log.on_dropped(b"peer", "x", now=0.0)
    log.on_dropped(b"peer", "x", now=1.0)
    lines = log.on_dropped(b"peer", "y", now=10.5)
    assert len(lines) == 2 and "dropped 1 more" in lines[0] and "dropped y from peer" in lines[1]


def test_senders_beyond_the_table_are_counted_together() -> None:
    log = BadFrameLog(interval_seconds=10, max_senders=2)
    assert len(log.on_dropped(b"a", "x", now=0.0)) == 1
    assert len(log.on_dropped(b"b", "x", now=0.0)) == 1
    for index in range(50):
        assert log.on_dropped(f"other{index}".encode(), "x", now=1.0) == []
    lines = log.on_tick(now=11.0)
    assert lines == [
        "Scheduler: dropped 50 more bad frame(s) from other senders (over 2 senders sent bad frames in 10s)"
    ]
    # The table emptied with the tick: new senders are followed again.
    assert len(log.on_dropped(b"c", "x", now=12.0)) == 1


@pytest.mark.parametrize(
    "identity, shown",
    [
        (b"C|host|4242|0a1b2c3d", "C|host|4242|0a1b2c3d"),
        (b"W|" + b"w" * 60, "W|" + "w" * 38 + "... (62 bytes)"),
        (b"\x00k\x8bEg", "0x006b8b4567"),
        (bytes(range(200)), "0x0001020304050607... (200 bytes)"),
        (b"", "(no identity)"),
    ],
)
def test_identities_are_shown_short_and_readable(identity: bytes, shown: str) -> None:
    assert short_identity(identity) == shown
