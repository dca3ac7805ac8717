"""The stored payload layout (scaler/protocol/stored_payload.py), written into and read from real memfd mappings."""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.client.serializer import DefaultSerializer, Serializer
from scaler.protocol import stored_payload as sp

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux only")


class Segment:
    """A memfd holding one payload, mapped as the store's writers and readers map it."""

    def __init__(self, payload: sp.PreparedPayload) -> None:
        self.size = payload.size
        self.fd = os.memfd_create("test-payload", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        writer = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED)
        assert payload.write_into(writer) == self.size
        writer.close()

    def map_private(self) -> mmap.mmap:
        return mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def map_shared_read_only(self) -> mmap.mmap:
        return mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)

    def close(self) -> None:
        os.close(self.fd)


def stored(obj: Any, serializer: Serializer | None = None) -> Segment:
    return Segment(sp.prepare(obj, serializer))


def is_view_of(array: np.ndarray, mapping: mmap.mmap) -> bool:
    return np.shares_memory(array, np.frombuffer(mapping, dtype=np.uint8))


# ---------------------------------------------------------------------------------------------- zero copy


def test_a_numpy_array_comes_back_as_a_writable_view_of_the_mapping_that_leaves_the_segment_unchanged() -> None:
    original = np.arange(1_000_000, dtype=np.float64)
    segment = stored(original)
    mapping = segment.map_private()

    array = sp.read(mapping)

    np.testing.assert_array_equal(array, original)
    assert is_view_of(array, mapping)  # not a copy
    assert array.flags.writeable
    array[:10] = -1.0  # copy-on-write: only this process's pages change
    again = sp.read(segment.map_shared_read_only())
    np.testing.assert_array_equal(again, original)
    assert not again.flags.writeable  # a read-only mapping gives read-only arrays, not a crash
    segment.close()


def test_the_array_keeps_its_mapping_alive_after_every_other_reference_is_gone() -> None:
    segment = stored(np.full(100_000, 7, dtype=np.int32))
    array = sp.read(segment.map_private())
    segment.close()
    assert int(array.sum()) == 700_000


def test_nested_structures_with_several_arrays_come_back_with_every_contiguous_array_a_view() -> None:
    arrays = [
        np.arange(10_000, dtype=np.int64),
        np.ones((300, 200), dtype=np.float32),
        np.asfortranarray(np.arange(60_000, dtype=np.int16).reshape(300, 200)),
        np.array([b"abc", b"de"], dtype="S3"),
    ]
    strided = np.arange(40_000, dtype=np.float64)[::4]  # not contiguous: pickled in-band (a copy)
    original = {"arrays": arrays, "pair": (arrays[0], "text"), "strided": strided, "n": 42}
    segment = stored(original)
    mapping = segment.map_private()

    result = sp.read(mapping)

    assert result["n"] == 42 and result["pair"][1] == "text"
    for got, expected in zip(result["arrays"], arrays):
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype and got.flags.f_contiguous == expected.flags.f_contiguous
        assert is_view_of(got, mapping)
    np.testing.assert_array_equal(result["strided"], strided)
    assert not is_view_of(result["strided"], mapping)
    # The same array twice in the object is one array twice in the result, as with pickle.
    assert result["pair"][0] is result["arrays"][0]
    segment.close()


def test_a_strided_array_at_the_top_is_made_contiguous_once_and_then_mapped() -> None:
    block = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)
    column_slice = block[:, :64]  # what a rechunk's slicing task returns: not contiguous
    segment = stored(column_slice)
    mapping = segment.map_private()

    result = sp.read(mapping)

    np.testing.assert_array_equal(result, column_slice)
    assert is_view_of(result, mapping) and result.flags.c_contiguous
    segment.close()


def test_out_of_band_buffers_are_64_byte_aligned_in_the_mapping() -> None:
    arrays = [np.arange(n, dtype=np.uint8) for n in (1, 63, 65, 4097, 100_003)]
    payload = sp.prepare(arrays)
    assert len(payload.layout.buffers) == len(arrays)
    assert all(offset % sp.BUFFER_ALIGNMENT == 0 for offset, _ in payload.layout.buffers)
    segment = Segment(payload)
    for array in sp.read(segment.map_private()):
        assert array.ctypes.data % sp.BUFFER_ALIGNMENT == 0
    segment.close()


# ---------------------------------------------------------------------------------------------- bytes


def test_large_bytes_go_out_of_band_and_come_back_as_bytes_that_own_their_memory() -> None:
    original = os.urandom(1 << 20)
    payload = sp.prepare(original)
    assert [length for _, length in payload.layout.buffers] == [len(original)]
    assert payload.layout.main_length < 200  # the main part only names the buffer
    segment = Segment(payload)
    mapping = segment.map_private()

    result = sp.read(mapping)

    assert type(result) is bytes and result == original
    mapping.close()  # raises BufferError if anything still viewed the mapping
    segment.close()


def test_bytes_one_level_into_a_tuple_list_or_dict_go_out_of_band_and_small_ones_stay_in_band() -> None:
    big = os.urandom(sp.OUT_OF_BAND_BYTES_MIN)
    small = b"tiny"
    for container in ((big, small), [small, big], {"big": big, "small": small}):
        payload = sp.prepare(container)
        assert [length for _, length in payload.layout.buffers] == [len(big)]
        segment = Segment(payload)
        result = sp.read(segment.map_private())
        assert result == container and type(result) is type(container)
        segment.close()
    deeper = {"inner": [big]}  # deeper than one level: in the main part (see the module docstring)
    assert sp.prepare(deeper).layout.buffers == ()
    assert sp.read(sp.prepare(deeper).to_bytes()) == deeper


def test_pieces_concatenate_to_the_written_payload() -> None:
    payload = sp.prepare({"a": np.arange(1000), "b": os.urandom(10_000), "c": [1, 2, 3]})
    written = bytearray(payload.size)
    payload.write_into(written)
    assert b"".join(bytes(piece) for piece in payload.pieces()) == bytes(written)
    assert any(isinstance(piece, memoryview) for piece in payload.pieces())  # the buffers, uncopied


def test_pieces_can_be_capped_in_size_without_copying() -> None:
    array = np.arange(1_000_000, dtype=np.uint8)
    payload = sp.prepare([array, os.urandom(100)])
    pieces = payload.pieces(max_piece_bytes=65_536)
    assert max(map(len, pieces)) == 65_536
    assert b"".join(bytes(piece) for piece in pieces) == payload.to_bytes()
    assert sum(np.shares_memory(np.frombuffer(piece, np.uint8), array) for piece in pieces) == 16  # views


def test_writing_into_a_buffer_too_small_or_read_only_is_refused() -> None:
    payload = sp.prepare(np.arange(1000))
    with pytest.raises(ValueError, match="does not fit"):
        payload.write_into(bytearray(payload.size - 1))
    with pytest.raises(ValueError, match="read-only"):
        payload.write_into(bytes(payload.size))


# ---------------------------------------------------------------------------------------------- serializers


class Utf8Serializer(Serializer):
    @staticmethod
    def serialize(obj: Any) -> bytes:
        return obj.encode()

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        assert type(payload) is bytes  # a custom serializer is promised bytes
        return payload.decode()


def test_a_custom_serializers_bytes_are_the_main_part_and_need_that_serializer_to_read() -> None:
    payload = sp.prepare("héllo", Utf8Serializer())
    assert payload.layout.format is sp.PayloadFormat.SERIALIZER and payload.layout.buffers == ()
    segment = Segment(payload)
    assert sp.read(segment.map_private(), Utf8Serializer()) == "héllo"
    with pytest.raises(sp.StoredPayloadError, match="custom serializer"):
        sp.read(segment.map_private())
    segment.close()
    with pytest.raises(sp.StoredPayloadError, match="default serializer"):
        sp.read(sp.prepare("x").to_bytes(), Utf8Serializer())
    assert sp.read(sp.prepare([1, 2]).to_bytes(), DefaultSerializer()) == [1, 2]


def test_a_custom_serializer_that_returns_no_bytes_is_named() -> None:
    class Broken(Serializer):
        @staticmethod
        def serialize(obj: Any) -> bytes:
            return obj  # type: ignore[no-any-return]

        @staticmethod
        def deserialize(payload: bytes) -> Any:
            return payload

    with pytest.raises(TypeError, match="Broken.serialize returned int"):
        sp.prepare(5, Broken())


# ---------------------------------------------------------------------------------------------- corruption


def corrupted(offset: int, value: bytes) -> bytearray:
    data = bytearray(sp.prepare([np.arange(100), np.arange(200)]).to_bytes())
    data[offset: offset + len(value)] = value
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        (bytearray(b"\x00" * 10), "shorter than the 32-byte header"),
        (corrupted(0, b"NOTSCALR"), "bad magic"),
        (corrupted(8, struct.pack("<H", 99)), "version 99"),
        (corrupted(10, struct.pack("<H", 7)), "unknown format 7"),
        (corrupted(16, struct.pack("<Q", 1 << 40)), "overrun"),
        (corrupted(24, struct.pack("<Q", 1 << 40)), "claims"),
        (corrupted(32, struct.pack("<Q", 65)), "misplaced"),  # the first buffer's offset, not aligned
        (corrupted(40, struct.pack("<Q", 1 << 40)), "misplaced"),  # the first buffer's length
        (corrupted(12, struct.pack("<I", 1 << 30)), "overrun"),  # a buffer count the header cannot hold
    ],
)
def test_a_corrupted_header_raises_a_clear_error(data: bytearray, message: str) -> None:
    with pytest.raises(sp.StoredPayloadError, match=message):
        sp.read(data)


def test_a_truncated_payload_raises_a_clear_error() -> None:
    data = sp.prepare(np.arange(1000)).to_bytes()
    with pytest.raises(sp.StoredPayloadError, match="claims"):
        sp.read(data[:-1])


# ---------------------------------------------------------------------------------------------- any object

VALUES = st.recursive(
    st.one_of(
        st.integers(), st.text(max_size=5), st.binary(max_size=5000),
        st.builds(lambda n, kind: np.arange(n, dtype=kind), st.integers(0, 3000), st.sampled_from(["u1", "f8", "i4"])),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.tuples(children, children),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
    ),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


@settings(max_examples=100, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_any_object_round_trips(value: Any) -> None:
    payload = sp.prepare(value)
    assert payload.size == payload.layout.total_length
    assert same(sp.read(payload.to_bytes()), value)
    assert same(sp.read(b"".join(bytes(piece) for piece in payload.pieces())), value)
