"""A processor keeps the values of the large results it made, within a byte budget, oldest out first."""

from __future__ import annotations

from scaler.worker.own_results import ABSENT, OwnResults


def test_a_kept_value_is_handed_over_once_as_the_very_object() -> None:
    results = OwnResults(limit_bytes=100)
    value = [1, 2, 3]
    results.add(b"a", value, 10)
    assert results.take(b"a") is value
    assert results.take(b"a") is ABSENT
    assert results.byte_count == 0


def test_the_oldest_values_go_first_when_the_budget_is_full() -> None:
    results = OwnResults(limit_bytes=100)
    for index in range(5):
        results.add(bytes([index]), index, 30)
    assert results.byte_count <= 100 and len(results) == 3
    assert [results.take(bytes([index])) for index in range(5)] == [ABSENT, ABSENT, 2, 3, 4]


def test_a_value_larger_than_the_budget_is_not_kept_and_pushes_nothing_out() -> None:
    results = OwnResults(limit_bytes=100)
    results.add(b"small", "s", 40)
    results.add(b"huge", "h", 101)
    assert results.take(b"huge") is ABSENT and results.take(b"small") == "s"


def test_forgotten_values_free_their_bytes() -> None:
    results = OwnResults(limit_bytes=100)
    results.add(b"a", "a", 60)
    results.forget([b"a", b"never kept"])
    assert results.byte_count == 0 and results.take(b"a") is ABSENT
