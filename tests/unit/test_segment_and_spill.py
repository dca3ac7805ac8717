"""Shared-memory segments (memfd) and spill files, for real, within this process."""

from __future__ import annotations

import os
import sys

import pytest

from scaler.store import segment as s
from scaler.store.spill import SpillError, SpillFile

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd is Linux only")


def memfds_open() -> int:
    return sum("memfd:" in os.readlink(f"/proc/self/fd/{fd}") for fd in _fds())


def _fds() -> list[str]:
    names = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        names.append(name)
    return names


def mappings_of(inode: int) -> int:
    """This process's mappings of a memfd (or any shmem file) with this inode number. Counted, not just
    looked for: in a long test session another memfd may carry a reused inode number."""
    with open("/proc/self/maps") as maps:
        return sum(
            fields[4] == str(inode) and "memfd:" in line for line in maps if len(fields := line.split()) > 4
        )


def test_a_segment_is_written_through_its_path_and_read_privately_copy_on_write() -> None:
    segment = s.Segment.create(10_000)
    assert segment.capacity == 10_000 and segment.path == f"/proc/{os.getpid()}/fd/{segment.fd}"
    assert s.write_pieces(segment.path, [b"hel", memoryview(b"lo")]) == 5
    reader = s.map_for_reading(segment.path, 10_000)
    assert reader[:5] == b"hello"
    reader[:5] = b"HELLO"  # private: the segment does not change
    assert s.map_for_reading(segment.path, 5)[:5] == b"hello"
    assert segment.mapping()[:5] == b"hello"
    segment.close()


def test_a_write_of_more_pieces_than_one_call_takes_lands_in_order() -> None:
    pieces = [bytes([index % 251]) * (index % 7) for index in range(3000)]  # empty ones too; over IOV_MAX
    expected = b"".join(pieces)
    segment = s.Segment.create(len(expected))
    assert s.write_pieces(segment.path, pieces) == len(expected)
    assert bytes(s.map_for_reading(segment.path, len(expected))) == expected
    segment.close()


def test_a_write_beyond_a_segments_capacity_fails_instead_of_growing_it() -> None:
    segment = s.Segment.create(s.PAGE_BYTES)
    with pytest.raises(PermissionError):
        s.write_pieces(segment.path, [bytes(s.PAGE_BYTES + 1)])
    assert os.fstat(segment.fd).st_size == s.PAGE_BYTES
    segment.close()


def test_a_segments_size_is_sealed() -> None:
    segment = s.Segment.create(s.PAGE_BYTES)
    with pytest.raises(PermissionError):
        os.ftruncate(segment.fd, 1)
    with pytest.raises(PermissionError):
        os.ftruncate(segment.fd, 10 * s.PAGE_BYTES)
    segment.close()


def test_a_mapping_outlives_the_segments_descriptor_and_the_memory_goes_with_the_mapping() -> None:
    before = memfds_open()
    segment = s.Segment.create(s.PAGE_BYTES)
    inode = os.fstat(segment.fd).st_ino
    s.write_pieces(segment.path, [b"abc"])
    reader = s.map_for_reading(segment.path, 3)
    segment.close()  # the owner is gone (as when a store dies)
    with_reader = mappings_of(inode)
    assert reader[:3] == b"abc" and with_reader >= 1
    reader.close()
    assert mappings_of(inode) == with_reader - 1
    assert memfds_open() == before  # nothing of it is left in this process


def test_a_freed_segments_path_is_a_clear_error() -> None:
    segment = s.Segment.create(s.PAGE_BYTES)
    path = segment.path
    segment.close()
    with pytest.raises(s.SegmentUnavailable, match="is gone"):
        s.map_for_reading(path, 10)


def test_capacities_are_whole_pages() -> None:
    assert s.capacity_for(1) == s.PAGE_BYTES
    assert s.capacity_for(s.PAGE_BYTES) == s.PAGE_BYTES
    assert s.capacity_for(s.PAGE_BYTES + 1) == 2 * s.PAGE_BYTES
    with pytest.raises(ValueError):
        s.Segment.create(0)


@pytest.mark.parametrize("use_tmpfile", [True, False], ids=["O_TMPFILE", "create-and-unlink"])
def test_a_spilled_segment_comes_back_byte_for_byte_and_leaves_nothing_in_the_directory(tmp_path, use_tmpfile) -> None:
    data = os.urandom(3 * s.PAGE_BYTES + 17)
    segment = s.Segment.create(s.capacity_for(len(data)))
    segment.mapping()[: len(data)] = data
    spilled = SpillFile.write(segment, len(data), str(tmp_path), use_tmpfile=use_tmpfile)
    segment.close()
    assert os.listdir(tmp_path) == []  # the file has no name: nothing to clean after a crash
    assert os.fstat(spilled.fd).st_size == len(data)

    back = s.Segment.create(s.capacity_for(len(data)))
    spilled.read_into(back)
    spilled.close()
    assert back.mapping()[: len(data)] == data
    back.close()


def test_spilling_into_a_directory_that_is_gone_is_a_spill_error(tmp_path) -> None:
    segment = s.Segment.create(s.PAGE_BYTES)
    with pytest.raises(SpillError, match="cannot make a file"):
        SpillFile.write(segment, 10, str(tmp_path / "missing"))
    segment.close()


def test_a_spilled_object_does_not_fit_a_smaller_segment(tmp_path) -> None:
    segment = s.Segment.create(2 * s.PAGE_BYTES)
    spilled = SpillFile.write(segment, 2 * s.PAGE_BYTES, str(tmp_path))
    small = s.Segment.create(s.PAGE_BYTES)
    with pytest.raises(ValueError, match="do not fit"):
        spilled.read_into(small)
    for thing in (segment, spilled, small):
        thing.close()
