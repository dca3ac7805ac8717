"""Fuzzing the wire decoder: random frames, and valid messages of every type mutated every which way.

The contract under test (messages.decode): it returns a well-formed message, or raises ProtocolDecodeError,
and nothing else; a small forged frame costs about as much time and memory as its bytes, whatever counts
it claims; and encode -> decode gives back an equal message. Runs are reproducible (derandomized, no
example database) so that CI sees the same examples every time.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from typing import Callable, TypeVar

import pytest
from fuzz_budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message_strategies import MESSAGE_TYPES, message_strategies, messages

from scaler.protocol import messages as m

Decoded = TypeVar("Decoded")

pytestmark = pytest.mark.timeout(120)



def fuzz(max_examples: int) -> settings:
    """Reproducible in CI: the same examples every run, nothing remembered between runs."""
    return settings(
        database=None,
        derandomize=True,
        deadline=None,
        max_examples=examples(max_examples),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


STRATEGIES = message_strategies()

# A forged frame must fail (or decode) within this, and allocate at most this much Python memory.
FORGED_FRAME_SECONDS = 0.5
FORGED_FRAME_PEAK_BYTES = 1 << 20


def decode_or_reject(frames: list) -> m.Message | None:
    """decode() under its contract: a well-formed message, or ProtocolDecodeError and nothing else."""
    try:
        message = m.decode(frames)
    except m.ProtocolDecodeError:
        return None
    assert_well_formed(message)
    return message


def assert_cheap(decode_or_reject: Callable[[list], Decoded], frames: list) -> Decoded:
    """`decode_or_reject(frames)`, failing if it took more than a forged frame may cost."""
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = decode_or_reject(frames)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < FORGED_FRAME_SECONDS, f"{elapsed:.3f}s for a {len(frames[0])}-byte frame"
    assert peak < FORGED_FRAME_PEAK_BYTES, f"{peak:,} bytes allocated for a {len(frames[0])}-byte frame"
    return result


def assert_well_formed(message: m.Message) -> None:
    assert type(message) in MESSAGE_TYPES, type(message)
    # Every field fits its wire type again: a decoded message can always be forwarded.
    m.encode(message)
    for payload in _payloads(message):
        assert isinstance(payload, (bytes, memoryview)), type(payload)


def _payloads(message: m.Message) -> list:
    if isinstance(message, m.TaskSubmission):
        return [item.payload for item in message.objects] + [arg for group in message.groups for arg in group.args]
    if isinstance(message, m.TaskResults):
        return list(message.payloads)
    return []


def unaligned(frame: bytes) -> memoryview:
    """The same bytes at an odd address, as a zmq frame may be."""
    return memoryview(b"\x00" + frame)[1:]


# ---------------------------------------------------------------------------------------------- round trip


def test_every_message_type_has_a_strategy():
    assert set(STRATEGIES) == set(MESSAGE_TYPES)


@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
@fuzz(max_examples=25)
@given(data=st.data())
def test_round_trip_gives_back_an_equal_message(kind, data):
    message = data.draw(STRATEGIES[kind])
    frames = m.encode(message)
    assert m.decode(frames) == message
    assert m.decode([unaligned(bytes(frames[0])), *frames[1:]]) == message


@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
@fuzz(max_examples=25)
@given(data=st.data())
def test_decode_ids_reads_the_ids_that_decode_reads(kind, data):
    message = data.draw(STRATEGIES[kind])
    ids = m.decode_ids(m.encode(message))
    if isinstance(message, m.TaskSubmission):
        assert ids == m.SubmissionIds([task_id for group in message.groups for task_id in group.task_ids],
                                      message.objects)
    elif isinstance(message, m.TaskResults):
        assert isinstance(ids, m.ResultIds)
        assert sorted(ids.finished_ids) == sorted([
            *message.succeeded_ids, *(failure.task_id for failure in message.failures),
            *(stored.task_id for stored in message.stored),
        ])
        assert ids.stored == [(stored.task_id, stored.object_id) for stored in message.stored]
    else:
        assert ids == message


# ---------------------------------------------------------------------------------------------- random frames


@fuzz(max_examples=300)
@given(frame=st.binary(max_size=200))
def test_random_bytes_are_a_message_or_a_protocol_error(frame):
    decode_or_reject([frame])
    decode_or_reject([unaligned(frame)])


@fuzz(max_examples=150)
@given(frames=st.lists(st.binary(max_size=64), max_size=4))
def test_random_frame_lists_are_a_message_or_a_protocol_error(frames):
    decode_or_reject(frames)


@fuzz(max_examples=200)
@given(words=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12), data=st.data())
def test_random_words_behind_a_plausible_header_are_a_message_or_a_protocol_error(words, data):
    # Random bytes almost never get past the segment table; a right one puts random pointers in play.
    segment_words = len(words)
    header = struct.pack("<II", 0, segment_words)
    body = struct.pack(f"<{segment_words}Q", *words)
    payload_frames = data.draw(st.lists(st.binary(max_size=8), max_size=2))
    decode_or_reject([header + body, *payload_frames])


# ---------------------------------------------------------------------------------------------- mutations


def _flip(data: st.DataObject, frame: bytes) -> bytes:
    if not frame:
        return frame
    index = data.draw(st.integers(0, len(frame) - 1))
    mask = data.draw(st.integers(1, 255))
    return frame[:index] + bytes([frame[index] ^ mask]) + frame[index + 1:]


def _set_byte(data: st.DataObject, frame: bytes) -> bytes:
    if not frame:
        return frame
    index = data.draw(st.integers(0, len(frame) - 1))
    value = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
    return frame[:index] + bytes([value]) + frame[index + 1:]


def _truncate(data: st.DataObject, frame: bytes) -> bytes:
    return frame[:data.draw(st.integers(0, len(frame)))]


def _extend(data: st.DataObject, frame: bytes) -> bytes:
    return frame + data.draw(st.binary(min_size=1, max_size=24))


def _insert(data: st.DataObject, frame: bytes) -> bytes:
    index = data.draw(st.integers(0, len(frame)))
    return frame[:index] + data.draw(st.binary(min_size=1, max_size=16)) + frame[index:]


def _delete(data: st.DataObject, frame: bytes) -> bytes:
    start = data.draw(st.integers(0, len(frame)))
    end = data.draw(st.integers(start, len(frame)))
    return frame[:start] + frame[end:]


def _word(data: st.DataObject, frame: bytes) -> int | None:
    words = len(frame) // 8
    return data.draw(st.integers(0, words - 1)) if words else None


def _inflate_count(data: st.DataObject, frame: bytes) -> bytes:
    """Oversized counts: a list pointer claims up to 2^29 - 1 elements, a struct pointer 65535-word sections,
    the segment table up to 2^32 - 1 segments or words. The bytes stay as small as they were."""
    index = _word(data, frame)
    if index is None:
        return frame
    (word,) = struct.unpack_from("<Q", frame, index * 8)
    if index == 0:  # the segment table: segment count - 1, then the first segment's size in words
        huge = data.draw(st.sampled_from([2**32 - 1, 2**31, 2**16, 511]))
        half = data.draw(st.sampled_from([0, 1]))
        word = (word & ~(0xFFFFFFFF << (32 * half))) | (huge << (32 * half))
    elif word & 3 == 1:  # list pointer: count in the top 29 bits
        count = data.draw(st.sampled_from([2**29 - 1, 2**28, 2**20, 4096]))
        word = (word & ((1 << 35) - 1)) | (count << 35)
    elif word & 3 == 0 and word:  # struct pointer (or a composite list's tag): section sizes
        data_words = data.draw(st.sampled_from([0, 1, 0xFFFF]))
        pointer_words = data.draw(st.sampled_from([0, 1, 0xFFFF]))
        word = (word & 0xFFFFFFFF) | (data_words << 32) | (pointer_words << 48)
    else:
        word = data.draw(st.integers(0, 2**64 - 1))
    return frame[:index * 8] + struct.pack("<Q", word) + frame[index * 8 + 8:]


def _repoint(data: st.DataObject, frame: bytes) -> bytes:
    """A pointer's offset moved: it points elsewhere, possibly outside the segment or back at itself."""
    index = _word(data, frame)
    if index is None or index == 0:
        return frame
    (word,) = struct.unpack_from("<Q", frame, index * 8)
    offset = data.draw(st.sampled_from([-1, -2, 0, 1, 2, 2**29 - 1, -(2**29)])) & ((1 << 30) - 1)
    word = (word & ~(((1 << 30) - 1) << 2)) | (offset << 2)
    return frame[:index * 8] + struct.pack("<Q", word) + frame[index * 8 + 8:]


BYTE_MUTATIONS = [_flip, _set_byte, _truncate, _extend, _insert, _delete, _inflate_count, _repoint]


def _drop_frame(data: st.DataObject, frames: list) -> list:
    if not frames:
        return frames
    index = data.draw(st.integers(0, len(frames) - 1))
    return frames[:index] + frames[index + 1:]


def _duplicate_frame(data: st.DataObject, frames: list) -> list:
    if not frames:
        return frames
    index = data.draw(st.integers(0, len(frames) - 1))
    return frames[:index + 1] + [frames[index]] + frames[index + 1:]


def _reorder_frames(data: st.DataObject, frames: list) -> list:
    return data.draw(st.permutations(frames))


def _add_frame(data: st.DataObject, frames: list) -> list:
    index = data.draw(st.integers(0, len(frames)))
    return frames[:index] + [data.draw(st.binary(max_size=16))] + frames[index:]


FRAME_MUTATIONS = [_drop_frame, _duplicate_frame, _reorder_frames, _add_frame]


def mutate(data: st.DataObject, frames: list) -> list:
    frames = [bytes(frame) for frame in frames]
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.booleans()) or not frames:
            frames = data.draw(st.sampled_from(FRAME_MUTATIONS))(data, frames)
        else:
            # Mostly the control frame: payload frames are opaque and only their count matters.
            index = 0 if data.draw(st.integers(0, 3)) else data.draw(st.integers(0, len(frames) - 1))
            frames[index] = data.draw(st.sampled_from(BYTE_MUTATIONS))(data, frames[index])
    return frames


@fuzz(max_examples=1000)
@given(message=messages(), data=st.data())
def test_mutated_messages_are_a_message_or_a_protocol_error(message, data):
    frames = mutate(data, m.encode(message))
    started = time.perf_counter()
    first = decode_or_reject(frames)
    assert time.perf_counter() - started < FORGED_FRAME_SECONDS
    # Deterministic: the same frames decode the same way, also from an unaligned buffer.
    if frames:
        second = decode_or_reject([unaligned(frames[0]), *frames[1:]])
        assert repr(first) == repr(second)  # repr: a mutated float may be NaN, which never equals itself


@pytest.mark.parametrize("kind", [m.TaskSubmission, m.TaskResults], ids=lambda kind: kind.__name__)
@fuzz(max_examples=60)
@given(data=st.data())
def test_inflated_counts_cost_no_more_than_the_frame(kind, data):
    """Every pointer of a list-heavy message claims huge counts in turn, and decoding stays small and quick."""
    message = data.draw(STRATEGIES[kind])
    frames = [bytes(frame) for frame in m.encode(message)]
    for _ in range(data.draw(st.integers(1, 3))):
        frames[0] = _inflate_count(data, frames[0])
    assert_cheap(decode_or_reject, frames)


# ---------------------------------------------------------------------------------------------- forged frames


def _struct_pointer(offset: int, data_words: int, pointer_words: int) -> int:
    return ((offset & ((1 << 30) - 1)) << 2) | (data_words << 32) | (pointer_words << 48)


def _list_pointer(offset: int, element_size: int, count: int) -> int:
    return 1 | ((offset & ((1 << 30) - 1)) << 2) | (element_size << 32) | (count << 35)


def _frame(words: list[int]) -> bytes:
    return struct.pack("<II", 0, len(words)) + struct.pack(f"<{len(words)}Q", *words)


def _submission_with(groups_pointer: int, target: list[int]) -> bytes:
    """root -> Message{submitTasks} -> TaskSubmission{objects: null, groups: <given>, quietTaskIds: null};
    `target` is laid out right after, at word 6 (so a groups pointer with offset 1 points at its start)."""
    submit_tasks = 5
    return _frame([
        _struct_pointer(0, 1, 1),      # 0: root pointer to the Message at word 1
        submit_tasks,                  # 1: Message data: the union discriminant
        _struct_pointer(0, 0, 3),      # 2: Message.submitTasks -> TaskSubmission at word 3
        0,                             # 3: objects
        groups_pointer,                # 4: groups
        0,                             # 5: quietTaskIds
        *target,                       # 6..
    ])


COMPOSITE = 7
EIGHT_BYTES = 5
FORGED = {
    # 2^29 - 1 empty structs in one tag word: the classic amplification attack on a naive reader.
    "empty-struct-list": _submission_with(_list_pointer(1, COMPOSITE, 0), [_struct_pointer(2**29 - 1, 0, 0)]),
    # A composite list whose tag claims far more elements than its word count holds.
    "tag-overclaims": _submission_with(_list_pointer(1, COMPOSITE, 1), [_struct_pointer(2**29 - 1, 1, 0), 0]),
    # The groups read as a list of 2^29 - 1 eight-byte elements.
    "primitive-overclaims": _submission_with(_list_pointer(1, EIGHT_BYTES, 2**29 - 1), [0]),
    # A segment table that claims 2^32 - 1 segments, and one that claims a 2^32 - 1 word segment.
    "many-segments": struct.pack("<II", 2**32 - 1, 1) + b"\x00" * 8,
    "huge-segment": struct.pack("<II", 0, 2**32 - 1) + b"\x00" * 8,
    # A composite list pointer that points back at itself.
    "self-loop": _submission_with(_list_pointer(-1, COMPOSITE, 1), []),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_frames_claiming_huge_counts_are_rejected_cheaply(name):
    frame = FORGED[name]
    assert len(frame) <= 80
    assert assert_cheap(decode_or_reject, [frame]) is None


def test_the_forgery_skeleton_is_a_real_submission():
    """The forged frames differ from a valid one only in the groups pointer, so the tests above aim true."""
    message = m.decode([_submission_with(0, [])])
    assert message == m.TaskSubmission(objects=[], groups=[])


def test_a_large_honest_message_stays_inside_the_traversal_limit():
    task_ids = list(range(200_000))
    message = m.CancelTasks(task_ids=task_ids)
    assert m.decode(m.encode(message)) == message
    group = m.TaskGroup(function_id=b"f" * 16, args_per_task=1, keywords=(), task_ids=task_ids, args=[b""] * 200_000)
    submission = m.TaskSubmission(objects=[], groups=[group] * 3)
    assert m.decode(m.encode(submission)) == submission
