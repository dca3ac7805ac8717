"""A store client's kept writable mappings (scaler/store/kept_mappings.py), on real segments of this process."""

from __future__ import annotations

import os
import sys

import pytest

from scaler.store import kept_mappings
from scaler.store.kept_mappings import KeptMappings
from scaler.store.segment import Segment, map_for_reading
from tests.unit.test_segment_and_spill import mappings_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd is Linux only")

LARGE = kept_mappings.MIN_KEPT_BYTES


def inode(segment: Segment) -> int:
    return os.fstat(segment.fd).st_ino


def recycled(segment: Segment) -> Segment:
    """`segment` with all its pages, as a store's recycled segment has them."""
    os.pwrite(segment.fd, bytes(segment.capacity), 0)
    return segment


def content(segment: Segment, size: int) -> bytes:
    return bytes(map_for_reading(segment.path, size))


def resident_kib_of_mappings(inode_number: int) -> list[int]:
    """The resident KiB (page table entries filled) of each of this process's mappings of that memfd inode."""
    sizes: list[int] = []
    with open("/proc/self/smaps") as smaps:
        current = False
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) > 4:
                current = fields[4] == str(inode_number) and "memfd:" in line
            elif current and fields[0] == "Rss:":
                sizes.append(int(fields[1]))
    return sizes


def test_a_new_large_segment_is_written_then_kept_mapped_when_it_comes_back() -> None:
    kept = KeptMappings()
    segment = Segment.create(LARGE)
    first = os.urandom(LARGE)
    kept.write(segment.path, [first[:100], memoryview(first)[100:]])  # fresh pages: written, not mapped
    assert content(segment, LARGE) == first and mappings_of(inode(segment)) == 0
    second = os.urandom(LARGE)
    kept.write(segment.path, [second])  # it came back: mapped now, and kept
    assert content(segment, LARGE) == second and mappings_of(inode(segment)) == 1
    # Its page table was filled at once: the writes after cost no fault per page.
    assert resident_kib_of_mappings(inode(segment)) == [LARGE // 1024]
    third = os.urandom(1000)
    kept.write(segment.path, [b"head", third])
    assert content(segment, 1004) == b"head" + third and mappings_of(inode(segment)) == 1
    kept.close()
    assert mappings_of(inode(segment)) == 0
    segment.close()


def test_a_small_segment_is_written_and_not_kept() -> None:
    kept = KeptMappings()
    segment = Segment.create(LARGE - 4096)
    kept.write(segment.path, [b"small"])
    assert content(segment, 5) == b"small" and mappings_of(inode(segment)) == 0
    kept.close()
    segment.close()


def test_at_most_max_kept_mappings_are_kept_the_oldest_go_first() -> None:
    kept = KeptMappings()
    segments = [recycled(Segment.create(LARGE)) for _ in range(kept_mappings.MAX_KEPT + 1)]
    for segment in segments:
        kept.write(segment.path, [b"x"])
    assert [mappings_of(inode(segment)) for segment in segments] == [0] + [1] * kept_mappings.MAX_KEPT
    kept.close()
    for segment in segments:
        segment.close()


def test_a_mapping_unused_for_longer_than_the_keep_time_goes_at_the_next_write(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = KeptMappings()
    old, new = recycled(Segment.create(LARGE)), recycled(Segment.create(LARGE))
    kept.write(old.path, [b"x"])
    monkeypatch.setattr(kept_mappings, "KEEP_SECONDS", 0.0)
    kept.write(new.path, [b"y"])
    assert mappings_of(inode(old)) == 0 and mappings_of(inode(new)) == 1
    kept.close()
    old.close()
    new.close()


def test_a_segment_of_the_same_path_but_another_inode_is_not_written_through_an_old_mapping() -> None:
    kept = KeptMappings()
    first = recycled(Segment.create(LARGE))
    kept.write(first.path, [b"first"])
    assert mappings_of(inode(first)) == 1
    path, old_inode, number = first.path, inode(first), first.fd
    first.close()  # its descriptor number is free again: another segment takes it
    second = Segment.create(LARGE)
    if second.fd != number:
        os.dup2(second.fd, number)
        os.close(second.fd)
        second.fd = number
    assert second.path == path and inode(second) != old_inode
    kept.write(second.path, [b"second"])
    assert content(second, 6) == b"second"
    kept.close()
    second.close()


def test_a_mapping_whose_segment_the_store_freed_goes_at_the_next_sweep() -> None:
    kept = KeptMappings()
    freed, alive = recycled(Segment.create(LARGE)), recycled(Segment.create(LARGE))
    kept.write(freed.path, [b"x"])
    kept.write(alive.path, [b"y"])
    freed_inode = inode(freed)
    freed.close()  # the store let go of it: only our mapping keeps its memory
    assert mappings_of(freed_inode) == 1
    kept.sweep()
    assert mappings_of(freed_inode) == 0 and mappings_of(inode(alive)) == 1 and len(kept) == 1
    kept.close()
    alive.close()
