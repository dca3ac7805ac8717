"""Reading an object out of a real segment of this process (scaler/store/local_read.py): `bytes` are
copied out without a mapping and the segment is let go at once; arrays are mapped and let go with the map."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

from scaler import Serializer
from scaler.protocol import stored_payload
from scaler.store.local_read import read_segment
from scaler.store.segment import Segment, write_pieces
from tests.unit.test_segment_and_spill import mappings_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd is Linux only")


class LetGo:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def stored(obj: object, serializer: Serializer | None = None) -> tuple[Segment, int, int]:
    payload = stored_payload.prepare(obj, serializer)
    segment = Segment.create(payload.size)
    write_pieces(segment.path, payload.pieces())
    return segment, payload.size, os.fstat(segment.fd).st_ino


def test_bytes_are_copied_out_with_no_mapping_and_the_segment_is_let_go_at_once() -> None:
    value = {"a": os.urandom(3 << 20), "b": [1, 2], "c": os.urandom(5000)}
    segment, size, inode = stored(value)
    let_go = LetGo()
    read = read_segment(segment.path, size, None, let_go)
    assert read == value and type(read["a"]) is bytes
    assert let_go.calls == 1 and mappings_of(inode) == 0
    segment.close()


def test_a_payload_with_an_array_is_mapped_and_let_go_when_the_array_is_gone() -> None:
    array = np.arange(1 << 18, dtype=np.float64)
    segment, size, inode = stored((array, os.urandom(10_000)))
    let_go = LetGo()
    read_array, read_bytes = read_segment(segment.path, size, None, let_go)
    assert np.array_equal(read_array, array) and read_array.flags.writeable and len(read_bytes) == 10_000
    assert let_go.calls == 0 and mappings_of(inode) == 1
    del read_array
    gc.collect()
    assert let_go.calls == 1 and mappings_of(inode) == 0
    segment.close()


def test_a_table_longer_than_the_first_read_is_read_whole() -> None:
    value = [bytes([index % 256]) * 4096 for index in range(5000)]  # a 80 KB table: over the first 64 KB read
    segment, size, _ = stored(value)
    let_go = LetGo()
    assert read_segment(segment.path, size, None, let_go) == value and let_go.calls == 1
    segment.close()


def test_a_custom_serializers_payload_is_copied_out() -> None:
    class Upper(Serializer):
        @staticmethod
        def serialize(obj: object) -> bytes:
            return str(obj).upper().encode()

        @staticmethod
        def deserialize(payload: bytes) -> object:
            return payload.decode()

    segment, size, inode = stored("x" * 100_000, Upper())
    let_go = LetGo()
    assert read_segment(segment.path, size, Upper(), let_go) == "X" * 100_000
    assert let_go.calls == 1 and mappings_of(inode) == 0
    segment.close()


def test_a_segment_that_is_gone_is_let_go_and_reported() -> None:
    segment, size, _ = stored(os.urandom(10_000))
    path = segment.path
    segment.close()
    let_go = LetGo()
    with pytest.raises(OSError):
        read_segment(path, size, None, let_go)
    assert let_go.calls == 1


def test_the_table_marks_whole_bytes_buffers_and_a_reader_gets_them_back() -> None:
    payload = stored_payload.prepare([os.urandom(5000), np.zeros(1000), os.urandom(6000)])
    assert payload.layout.whole_bytes == (True, False, True) and not payload.layout.only_whole_bytes
    layout = stored_payload.read_layout(payload.to_bytes())
    assert layout == payload.layout
    assert stored_payload.prepare(os.urandom(5000)).layout.only_whole_bytes
    assert stored_payload.prepare([1, 2, 3]).layout.only_whole_bytes  # no buffers at all
