"""The plain reader of submissions and results (scaler/protocol/capnp_fast.py) against pycapnp's decode.

Its contract: for any frame it returns None, or exactly what pycapnp's decode gives for that frame; and for
the messages of a round trip (one group of plain tasks, successes only) it does not return None.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message_strategies import SMALL_BYTES, U64, submissions, task_groups, task_results

from scaler.protocol import capnp_codec
from scaler.protocol import messages as m
from scaler.protocol.capnp_fast import decode_plain, encode_plain

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(database=None, derandomize=True, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pycapnp_decode(frame: bytes) -> m.Message | None:
    """What the codec decodes without the plain reader; None for a frame it rejects."""
    try:
        return capnp_codec._read([frame], capnp_codec._decode_root)
    except m.ProtocolDecodeError:
        return None


def only_frame(message: m.Message) -> bytes | None:
    frames = capnp_codec.encode(message)
    return bytes(frames[0]) if len(frames) == 1 else None


def round_trip_messages() -> list[m.Message]:
    group = m.TaskGroup(function_id=b"f" * 16, args_per_task=1, keywords=(), task_ids=[(7 << 32) | 1],
                        args=[b"\x80\x05K\x01."], required_tags=("python",))
    return [
        m.TaskSubmission(objects=[], groups=[group]),
        m.TaskSubmission(objects=[], groups=[m.TaskGroup(
            function_id=b"g" * 16, args_per_task=2, keywords=(), task_ids=[1, 2, 3], args=[b"a", b"", b"c" * 9] * 2,
            serializer_id=b"s" * 16, nesting_depth=2, profiling=True, report_start=True, required_tags=("gpu",),
            wait_for_tags_ms=5,
            priority=-3, stream_output=True, keep_results=True, keep_in_stores=True, ahead=True,
        ), group]),
        m.TaskResults(succeeded_ids=[(7 << 32) | 1], payloads=[b"\x80\x05K\x01."], failures=[]),
        m.TaskResults(succeeded_ids=[1, 2], payloads=[b"", b"x" * 100], failures=[], run_seconds=0.25, ran_tasks=2),
        m.TaskResults(succeeded_ids=[], payloads=[], failures=[]),
    ]


@pytest.mark.parametrize("message", round_trip_messages(), ids=lambda message: type(message).__name__)
def test_the_messages_of_a_round_trip_are_read_plainly_and_alike(message: m.Message) -> None:
    frame = only_frame(message)
    assert frame is not None
    assert decode_plain(frame) == message == pycapnp_decode(frame)
    assert m.decode([memoryview(b"\0" + frame)[1:]]) == message  # the codec's way in, from an unaligned view


def test_other_messages_and_other_shapes_are_left_to_pycapnp() -> None:
    group = round_trip_messages()[0].groups[0]  # type: ignore[attr-defined]
    failure = m.TaskFailure(task_id=1, kind=m.FailureKind.RAISED, type_name="E")
    for message in [
        m.Heartbeat(), m.CancelTasks(task_ids=[1]),
        m.TaskSubmission(objects=[m.ObjectPayload(object_id=b"o" * 16, payload=b"p")], groups=[group]),
        m.TaskSubmission(objects=[], groups=[group], quiet_task_ids=[1]),
        m.TaskSubmission(objects=[], groups=[m.TaskGroup(b"f" * 16, 1, ("k",), [1], [b"a"])]),
        m.TaskSubmission(objects=[], groups=[m.TaskGroup(b"f" * 16, 1, (), [1], [b"a"], required_tags=("a", "b"))]),
        m.TaskSubmission(objects=[], groups=[m.TaskGroup(b"f" * 16, 1, (), [1], [b"o" * 16], object_arg_indices=[0])]),
        m.TaskResults(succeeded_ids=[], payloads=[], failures=[failure]),
        m.TaskResults(succeeded_ids=[1], payloads=[b"a"], failures=[], stored=[m.StoredResult(2, b"o" * 16, 3, "h")]),
    ]:
        frame = only_frame(message)
        assert frame is not None
        assert decode_plain(frame) is None
        assert m.decode([frame]) == message


@FUZZ
@given(message=st.one_of(submissions(), task_results(), st.builds(
    m.TaskSubmission, objects=st.just([]), groups=st.lists(task_groups(U64, consistent=True), max_size=3),
)))
def test_whatever_it_reads_pycapnp_reads_alike(message: m.Message) -> None:
    frame = only_frame(message)
    if frame is not None:
        plain = decode_plain(frame)
        assert plain is None or plain == pycapnp_decode(frame) == message


@FUZZ
@given(message=st.sampled_from(round_trip_messages()), data=st.data())
def test_a_mutated_frame_is_read_alike_or_left_to_pycapnp(message: m.Message, data: st.DataObject) -> None:
    frame = bytearray(only_frame(message) or b"")
    for _ in range(data.draw(st.integers(1, 4))):
        if len(frame) < 8:
            break
        kind = data.draw(st.sampled_from(["byte", "word", "cut", "grow"]))
        if kind == "byte":
            frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
        elif kind == "word":  # a pointer or count made anything at all
            at = data.draw(st.integers(0, len(frame) // 4 - 1)) * 4
            frame[at:at + 4] = struct.pack("<I", data.draw(st.integers(0, 2**32 - 1)))
        elif kind == "cut":
            del frame[data.draw(st.integers(0, len(frame) - 1)):]
        else:
            frame += data.draw(SMALL_BYTES)
    plain = decode_plain(bytes(frame))
    assert plain is None or plain == pycapnp_decode(bytes(frame))


def test_pointers_covering_the_same_words_again_and_again_are_left_to_pycapnp() -> None:
    """A small frame whose payload pointers all name one blob: the plain reader reads no more than the frame's
    words, and leaves it to pycapnp (whose traversal limit refuses it)."""
    blob = b"x" * 4000
    message = m.TaskResults(succeeded_ids=list(range(201)), payloads=[blob] + [b"y"] * 200, failures=[])
    frame = bytearray(only_frame(message) or b"")  # one segment (8 KiB): the plain reader's shape
    first = frame.index(blob)
    small = struct.pack("<I", (1 << 3) | 2)
    positions = [at for at in range(8, len(frame), 8) if frame[at + 4:at + 8] == small]
    assert len(positions) == 200
    for at in positions:
        frame[at:at + 8] = struct.pack("<iI", (((first - (at + 8)) // 8) << 2) | 1, (4000 << 3) | 2)
    assert decode_plain(bytes(frame)) is None
    assert pycapnp_decode(bytes(frame)) is None


def pycapnp_encode(message: m.TaskResults) -> list[m.Buffer]:
    """The codec's encode of results without the plain writer."""
    builder = capnp_codec._schema.Message.new_message()
    frames: list[m.Buffer] = [b""]
    capnp_codec._encode_results(builder, message, frames)
    frames[0] = builder.to_bytes()
    return frames


@FUZZ
@given(message=st.one_of(task_results(), st.builds(
    m.TaskResults, succeeded_ids=st.lists(U64, max_size=40), failures=st.just([]),
    payloads=st.lists(st.binary(max_size=600), max_size=40),
    run_seconds=st.floats(allow_nan=False), ran_tasks=st.integers(0, 2**32 - 1),
)))
def test_plain_results_are_written_byte_for_byte_as_pycapnp_writes_them(message: m.TaskResults) -> None:
    plain = encode_plain(message)
    frames = pycapnp_encode(message)
    if plain is not None:
        assert [plain] == frames
    else:
        assert message.failures or message.profiles or message.warnings or message.stored or len(frames) > 1 or (
            len(frames[0]) > 8 * 1024 + 8)


def test_the_round_trips_results_and_the_largest_one_segment_are_written_plainly() -> None:
    for message in round_trip_messages():
        if isinstance(message, m.TaskResults):
            assert encode_plain(message) == pycapnp_encode(message)[0]
    for size in range(7900, 8100):  # around pycapnp's first segment (1024 words)
        message = m.TaskResults(succeeded_ids=[1], payloads=[b"x" * size], failures=[])
        plain = encode_plain(message)
        frames = pycapnp_encode(message)
        assert plain == frames[0] if plain is not None else struct.unpack_from("<I", frames[0])[0] > 0


@pytest.mark.parametrize("task_id", [-1, 2**64])
def test_a_value_its_field_cannot_hold_is_left_to_the_codec(task_id: int) -> None:
    message = m.TaskResults(succeeded_ids=[task_id], payloads=[b"a"], failures=[])
    assert encode_plain(message) is None
    with pytest.raises(Exception) as plain_error:
        m.encode(message)
    with pytest.raises(Exception) as pycapnp_error:
        pycapnp_encode(message)
    assert type(plain_error.value) is type(pycapnp_error.value)
