"""The decisions of stream_output (output_limits.py): which lines of a task's output leave, when, what is dropped."""

from __future__ import annotations

import pytest

from scaler.protocol.messages import OutputStream
from scaler.worker.output_limits import OutputLimits, TaskOutputLimiter

pytestmark = pytest.mark.timeout(30)

OUT, ERR, LOG = int(OutputStream.STDOUT), int(OutputStream.STDERR), int(OutputStream.LOG)


def _texts(messages) -> list[tuple[int, str]]:
    return [chunk for message in messages for chunk in message]


def test_whole_lines_leave_in_order_across_streams_and_the_first_at_once() -> None:
    limiter = TaskOutputLimiter(OutputLimits(), now=0.0)
    limiter.write(OUT, "a", 0.0)
    assert not limiter.due(0.0)  # no whole line yet
    limiter.write(OUT, "b\nc\n", 0.0)
    limiter.write(ERR, "e\n", 0.0)
    limiter.write(OUT, "d\n", 0.0)
    assert limiter.due(0.0)
    assert _texts(limiter.take(0.0)) == [(OUT, "ab\nc\n"), (ERR, "e\n"), (OUT, "d\n")]


def test_later_lines_wait_for_the_flush_interval_and_the_end_sends_the_rest() -> None:
    limits = OutputLimits(flush_seconds=0.05)
    limiter = TaskOutputLimiter(limits, now=0.0)
    limiter.write(OUT, "one\n", 0.0)
    limiter.take(0.0)
    limiter.write(OUT, "two\n", 0.01)
    assert not limiter.due(0.01)
    assert limiter.due(0.06)
    limiter.write(LOG, "WARNING x: unfinished", 0.02)
    assert _texts(limiter.finish(0.03)) == [(OUT, "two\n"), (LOG, "WARNING x: unfinished\n")]


def test_a_long_line_is_cut_and_says_how_much() -> None:
    limiter = TaskOutputLimiter(OutputLimits(line_bytes=10), now=0.0)
    limiter.write(OUT, "0123456789", 0.0)
    limiter.write(OUT, "abcdef\n", 0.0)
    assert _texts(limiter.take(0.0)) == [(OUT, "0123456789 [... 6 bytes cut]\n")]
    assert limiter.dropped_total == 0


def test_a_loop_is_held_to_the_rate_and_the_drop_is_announced() -> None:
    limits = OutputLimits(bytes_per_second=1000, burst_bytes=1000, total_bytes=10**9)
    limiter = TaskOutputLimiter(limits, now=0.0)
    line = "x" * 99 + "\n"  # 100 bytes
    kept = 0
    for step in range(1000):  # 100 kB over one second
        now = step / 1000
        limiter.write(OUT, line, now)
        if limiter.due(now):
            kept += sum(text.count("\n") for stream, text in _texts(limiter.take(now)) if stream == OUT)
    messages = limiter.finish(1.0)
    kept += sum(text.count("\n") for stream, text in _texts(messages) if stream == OUT)
    assert 10 <= kept <= 21  # the 1000-byte burst, and 1000 bytes/s for one second
    assert limiter.dropped_total == (1000 - kept) * 100
    notices = [text for stream, text in _texts(messages) if stream == ERR]
    assert notices and notices[-1].startswith("... ") and "bytes of output dropped" in notices[-1]


def test_the_total_is_bounded_and_every_drop_is_counted() -> None:
    limits = OutputLimits(bytes_per_second=10**9, burst_bytes=10**9, total_bytes=1000)
    limiter = TaskOutputLimiter(limits, now=0.0)
    for index in range(50):
        limiter.write(OUT, "y" * 99 + "\n", float(index))
    messages = limiter.finish(100.0)
    kept = [text for stream, text in _texts(messages) if stream == OUT]
    assert sum(map(len, kept)) == 1000
    assert limiter.dropped_total == 4000
    assert _texts(messages)[-1] == (ERR, "... 4,000 bytes of output dropped (" + limits.describe() + ")\n")


def test_messages_stay_within_their_size() -> None:
    limits = OutputLimits(bytes_per_second=10**9, burst_bytes=10**9, message_bytes=1000)
    limiter = TaskOutputLimiter(limits, now=0.0)
    for _ in range(30):
        limiter.write(OUT, "z" * 99 + "\n", 0.0)
    messages = limiter.finish(0.0)
    assert len(messages) == 3
    assert all(sum(len(text.encode()) for _, text in message) <= 1000 for message in messages)


def test_nothing_written_sends_nothing() -> None:
    limiter = TaskOutputLimiter(OutputLimits(), now=0.0)
    assert not limiter.due(1.0)
    assert limiter.finish(1.0) == []
