"""A processor's record of the large results it made (scaler/worker/own_results.py): their values, kept for
the dependents placed here, and their bytes, written into the store only when asked, within one byte budget."""

from __future__ import annotations

from scaler.protocol.stored_payload import PayloadFormat, PreparedPayload
from scaler.worker.own_results import ABSENT, OwnResults


def payload(size: int) -> PreparedPayload:
    return PreparedPayload(PayloadFormat.PICKLE, b"x" * size, [])


def test_a_kept_value_is_handed_over_once_as_the_very_object() -> None:
    results = OwnResults(limit_bytes=1000)
    value = [1, 2, 3]
    assert results.add(b"a", value, payload(10)) == []
    assert results.take(b"a") is value
    assert results.take(b"a") is ABSENT


def test_a_result_is_written_when_asked_and_only_once_and_its_value_stays() -> None:
    results = OwnResults(limit_bytes=1000)
    first, second = payload(100), payload(200)
    results.add(b"a", "a", first)
    results.add(b"b", "b", second)
    assert results.to_write([b"b", b"unknown"]) == [(b"b", second)]
    assert results.to_write([b"b"]) == []  # written already
    assert results.take(b"b") == "b"
    assert len(results) == 1 and results.byte_count == first.size


def test_a_value_handed_over_keeps_its_bytes_until_they_are_written() -> None:
    results = OwnResults(limit_bytes=1000)
    kept = payload(100)
    results.add(b"a", "a", kept)
    assert results.take(b"a") == "a"
    assert results.byte_count == kept.size
    assert results.all_to_write() == [(b"a", kept)]
    assert len(results) == 0 and results.byte_count == 0


def test_a_freed_result_is_neither_kept_nor_written() -> None:
    results = OwnResults(limit_bytes=1000)
    results.add(b"a", "a", payload(100))
    results.forget([b"a", b"never kept"])
    assert results.take(b"a") is ABSENT and results.to_write([b"a"]) == [] and results.all_to_write() == []
    assert results.byte_count == 0


def test_past_the_budget_the_oldest_results_are_written_at_once_and_their_values_dropped() -> None:
    oldest, middle, newest = payload(100), payload(100), payload(100)
    results = OwnResults(limit_bytes=oldest.size * 5 // 2)
    results.add(b"oldest", "o", oldest)
    results.add(b"middle", "m", middle)
    assert results.add(b"newest", "n", newest) == [(b"oldest", oldest)]
    assert results.take(b"oldest") is ABSENT and results.take(b"middle") == "m"
    assert results.all_to_write() == [(b"middle", middle), (b"newest", newest)]
    assert results.byte_count <= oldest.size * 5 // 2


def test_a_result_written_already_and_pushed_out_is_not_written_again() -> None:
    first, second = payload(100), payload(100)
    results = OwnResults(limit_bytes=first.size * 3 // 2)
    results.add(b"first", "f", first)
    assert results.to_write([b"first"]) == [(b"first", first)]
    assert results.add(b"second", "s", second) == []  # the first one's value goes, its bytes are in the store
    assert results.take(b"first") is ABSENT and results.take(b"second") == "s"


def test_a_result_over_the_budget_by_itself_is_written_at_once_and_pushes_nothing_out() -> None:
    results = OwnResults(limit_bytes=150)
    small, huge = payload(40), payload(200)
    results.add(b"small", "s", small)
    assert results.add(b"huge", "h", huge) == [(b"huge", huge)]
    assert results.take(b"huge") is ABSENT and results.take(b"small") == "s"
