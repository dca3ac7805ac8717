"""Which large results a processor has still to write into its store (scaler/worker/deferred_results.py)."""

from __future__ import annotations

from scaler.protocol.stored_payload import PayloadFormat, PreparedPayload
from scaler.worker.deferred_results import DeferredResults


def payload(size: int) -> PreparedPayload:
    return PreparedPayload(PayloadFormat.PICKLE, b"x" * size, [])


def test_a_result_is_written_when_asked_and_only_once() -> None:
    deferred = DeferredResults()
    first, second = payload(100), payload(200)
    assert deferred.defer(b"a", first) == [] and deferred.defer(b"b", second) == []
    assert deferred.take([b"b", b"unknown"]) == [(b"b", second)]
    assert deferred.take([b"b"]) == []  # written already
    assert len(deferred) == 1 and deferred.byte_count == first.size


def test_a_freed_result_is_never_written() -> None:
    deferred = DeferredResults()
    deferred.defer(b"a", payload(100))
    deferred.forget([b"a"])
    assert deferred.take([b"a"]) == [] and deferred.take_all() == [] and deferred.byte_count == 0


def test_past_the_byte_limit_the_oldest_results_are_written_at_once() -> None:
    oldest, middle, newest = payload(100), payload(100), payload(100)
    deferred = DeferredResults(limit_bytes=oldest.size * 5 // 2)
    deferred.defer(b"oldest", oldest)
    deferred.defer(b"middle", middle)
    assert deferred.defer(b"newest", newest) == [(b"oldest", oldest)]
    assert deferred.take_all() == [(b"middle", middle), (b"newest", newest)]
    assert len(deferred) == 0 and deferred.byte_count == 0
