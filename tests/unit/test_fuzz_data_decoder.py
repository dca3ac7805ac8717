"""Fuzzing the data protocol's decoder (scaler/protocol/data_messages.py), as test_fuzz_decoder.py does the
control protocol's: a well-formed message or ProtocolDecodeError, nothing else; small forged frames stay
cheap; encode -> decode gives back an equal message."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_decoder import FORGED_FRAME_SECONDS, _inflate_count, assert_cheap, fuzz, mutate, unaligned

from scaler.protocol import data_messages as d

pytestmark = pytest.mark.timeout(120)

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
OBJECT_IDS = st.binary(min_size=1, max_size=20)
PIECES = st.lists(st.one_of(st.binary(max_size=40), st.just(b"P" * 70_000)), max_size=3)

LOANS = st.builds(
    d.MemoryLoan, pid=st.integers(1, 2**32 - 1), header=st.binary(max_size=40),
    ranges=st.lists(st.tuples(U64, U64), min_size=1, max_size=4).map(tuple), cookie_address=U64,
    cookie=st.binary(min_size=1, max_size=16),
)

STRATEGIES = {
    d.Allocate: st.builds(d.Allocate, request_id=U64, size=U64, pid=U32),
    d.Segment: st.builds(d.Segment, request_id=U64, path=TEXT, size=U64),
    d.Seal: st.builds(d.Seal, request_id=U64, object_id=OBJECT_IDS, path=TEXT, size=U64, pid=U32, name=TEXT),
    d.Stored: st.builds(d.Stored, request_id=U64, object_id=OBJECT_IDS),
    d.Put: st.builds(d.Put, request_id=U64, object_id=OBJECT_IDS, payload=PIECES, name=TEXT),
    d.Get: st.builds(
        d.Get, request_id=U64, object_id=OBJECT_IDS, local=st.booleans(), wait_ms=U32, pid=U32, holder=TEXT,
        max_frame_bytes=U64,
    ),
    d.Located: st.builds(d.Located, request_id=U64, object_id=OBJECT_IDS, path=TEXT, size=U64),
    d.ObjectData: st.builds(d.ObjectData, request_id=U64, object_id=OBJECT_IDS, payload=PIECES),
    d.Missing: st.builds(d.Missing, request_id=U64, object_id=OBJECT_IDS, reason=TEXT),
    d.Release: st.builds(d.Release, object_ids=st.lists(OBJECT_IDS, max_size=5), pid=U32),
    d.Failed: st.builds(d.Failed, request_id=U64, reason=TEXT),
    d.Delete: st.builds(d.Delete, object_ids=st.lists(OBJECT_IDS, max_size=5)),
    d.StatusRequest: st.builds(d.StatusRequest, request_id=U64),
    d.StoreStatus: st.builds(
        d.StoreStatus, request_id=U64, capacity_bytes=U64, resident_bytes=U64, held_bytes=U64, spilled_bytes=U64,
        pinned_bytes=U64, pooled_bytes=U64, object_count=U64,
    ),
    d.Lend: st.builds(d.Lend, request_id=U64, object_id=OBJECT_IDS, size=U64, loan=LOANS, name=TEXT),
    d.Borrowed: st.builds(d.Borrowed, request_id=U64, object_id=OBJECT_IDS, size=U64, loan=LOANS),
}
MESSAGE_TYPES = list(STRATEGIES)
MESSAGES = st.one_of(*STRATEGIES.values())


def decode_or_reject(frames: list) -> d.DataMessage | None:
    try:
        message = d.decode(frames)
    except d.ProtocolDecodeError:
        return None
    assert type(message) in MESSAGE_TYPES, type(message)
    d.encode(message)  # every field fits its wire type again
    return message


def test_every_message_type_has_a_strategy() -> None:
    union_members = set(d.DataMessage.__args__)  # type: ignore[attr-defined]
    assert set(STRATEGIES) == union_members


@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
@fuzz(max_examples=25)
@given(data=st.data())
def test_round_trip_gives_back_an_equal_message(kind, data) -> None:
    message = data.draw(STRATEGIES[kind])
    frames = d.encode(message)
    assert d.decode(frames) == message
    assert d.decode([unaligned(bytes(frames[0])), *frames[1:]]) == message


@fuzz(max_examples=300)
@given(frame=st.binary(max_size=200))
def test_random_bytes_are_a_message_or_a_protocol_error(frame) -> None:
    decode_or_reject([frame])
    decode_or_reject([unaligned(frame)])


@fuzz(max_examples=200)
@given(words=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12), data=st.data())
def test_random_words_behind_a_plausible_header_are_a_message_or_a_protocol_error(words, data) -> None:
    header = struct.pack("<II", 0, len(words))
    body = struct.pack(f"<{len(words)}Q", *words)
    decode_or_reject([header + body, *data.draw(st.lists(st.binary(max_size=8), max_size=2))])


@fuzz(max_examples=700)
@given(message=MESSAGES, data=st.data())
def test_mutated_messages_are_a_message_or_a_protocol_error(message, data) -> None:
    frames = mutate(data, d.encode(message))
    started = time.perf_counter()
    first = decode_or_reject(frames)
    assert time.perf_counter() - started < FORGED_FRAME_SECONDS
    if frames:
        second = decode_or_reject([unaligned(frames[0]), *frames[1:]])
        assert repr(first) == repr(second)


@pytest.mark.parametrize("kind", [d.Release, d.Delete], ids=lambda kind: kind.__name__)
@fuzz(max_examples=60)
@given(data=st.data())
def test_inflated_counts_cost_no_more_than_the_frame(kind, data) -> None:
    frames = [bytes(frame) for frame in d.encode(data.draw(STRATEGIES[kind]))]
    for _ in range(data.draw(st.integers(1, 3))):
        frames[0] = _inflate_count(data, frames[0])
    assert_cheap(decode_or_reject, frames)


def test_payload_frames_must_match_the_message() -> None:
    frames = d.encode(d.Put(1, b"x", [b"abc", b"de"]))
    with pytest.raises(d.ProtocolDecodeError, match="names 2 payload frame"):
        d.decode(frames[:2])
    with pytest.raises(d.ProtocolDecodeError, match="hold 6 bytes, the message says 5"):
        d.decode([frames[0], b"abc", b"def"])
    with pytest.raises(d.ProtocolDecodeError, match="carries no payload"):
        d.decode([*d.encode(d.Stored(1, b"x")), b"extra"])
    with pytest.raises(d.ProtocolDecodeError, match="object id is empty"):
        d.decode(d.encode(d.Get(1, b"", local=True)))


def test_a_large_honest_release_stays_inside_the_traversal_limit() -> None:
    message = d.Release([i.to_bytes(16, "little") for i in range(50_000)], pid=7)
    assert d.decode(d.encode(message)) == message
