"""Payload reads and writes in bounded pieces (bounded_io.py), with small pieces so that every boundary is met:
a short call is progress, a call that moves nothing is an error, and the bytes land where they belong."""

from __future__ import annotations

import os
import sys

import pytest

from scaler.protocol import stored_payload
from scaler.store import segment as s
from scaler.store.borrowed_memory import LoanUnreadable, read_parts, read_payload
from scaler.store.bounded_io import NoProgress, Span, move_in_pieces
from scaler.store.lent_objects import LentObjects

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd and process_vm_readv")


def pattern(length: int, seed: int = 0) -> bytes:
    return bytes((seed + index * 7) % 251 for index in range(length))


def test_pieces_move_in_calls_no_larger_than_asked_and_short_calls_go_on_where_they_stopped() -> None:
    pieces = [pattern(5, 1), b"", pattern(7, 2), pattern(2, 3), b"", pattern(11, 4)]
    target = bytearray()
    calls: list[list[Span]] = []

    def move(spans: list[Span], moved: int) -> int:
        assert moved == len(target)
        calls.append(spans)
        budget = 3  # a kernel that moves less than asked
        for index, start, length in spans:
            take = min(length, budget)
            target.extend(pieces[index][start: start + take])
            budget -= take
            if take < length or not budget:
                break
        return 3 - budget

    assert move_in_pieces([len(piece) for piece in pieces], move, chunk_bytes=4, max_pieces=2) == 25
    assert bytes(target) == b"".join(pieces)
    assert all(sum(length for _, _, length in spans) <= 4 and len(spans) <= 2 for spans in calls)
    assert all(length > 0 for spans in calls for _, _, length in spans)


def test_a_call_that_moves_nothing_is_an_error_not_a_retry() -> None:
    calls = []

    def move(spans: list[Span], moved: int) -> int:
        calls.append(moved)
        return 4 if moved < 8 else 0

    with pytest.raises(NoProgress, match="moved 8 of 20 bytes, then nothing more"):
        move_in_pieces([20], move, chunk_bytes=4)
    assert calls == [0, 4, 8]
    assert move_in_pieces([0, 0], move) == 0  # nothing to move: no call at all
    assert calls == [0, 4, 8]


@linux_only
def test_a_segment_is_written_and_read_back_in_small_calls() -> None:
    segment = s.Segment.create(s.capacity_for(1000))
    try:
        pieces = [pattern(300, 1), memoryview(pattern(0)), pattern(411, 2), bytearray(pattern(9, 3))]
        assert s.write_descriptor(segment.fd, pieces, segment.path, chunk_bytes=64) == 720
        whole = b"".join(bytes(piece) for piece in pieces)
        assert s.read_copy(segment.fd, 720, 0, chunk_bytes=50) == whole
        assert s.read_copy(segment.fd, 333, 101, chunk_bytes=1) == whole[101:434]
        assert s.read_copy(segment.fd, 0, 5, chunk_bytes=8) == b""
        with pytest.raises(s.SegmentUnavailable, match="could not be read"):
            s.read_copy(segment.fd, 200, segment.capacity - 100, chunk_bytes=64)  # past its end
    finally:
        segment.close()


@linux_only
def test_a_loan_is_read_in_small_calls_and_its_cookie_still_decides() -> None:
    value = (pattern(10_000, 1), "between", pattern(70_000, 2))
    payload = stored_payload.prepare(value)
    lent = LentObjects()
    loan = lent.lend(b"object", payload, os.getpid())  # this process reads itself, as a reader reads a lender
    layout = stored_payload.read_layout(loan.header, payload.size)
    parts = read_parts(loan, chunk_bytes=4093)
    assert stored_payload.read_parts(layout, parts[0], parts[1:]) == value
    assert bytes(read_payload(loan, payload.size, chunk_bytes=1000)) == payload.to_bytes()
    lent.let_go([b"object"])
    with pytest.raises(LoanUnreadable, match="no longer lends"):
        read_parts(loan, chunk_bytes=4093)
