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


def content(segment: Segment, size: int) -> bytes:
    return bytes(map_for_reading(segment.path, size))


def test_a_large_segment_is_written_then_kept_mapped_and_written_through_the_mapping_next_time() -> None:
    kept = KeptMappings()
    segment = Segment.create(LARGE)
    first = os.urandom(LARGE)
    kept.write(segment.path, [first[:100], memoryview(first)[100:]])
    assert content(segment, LARGE) == first and mappings_of(inode(segment)) == 1
    second = os.urandom(1000)
    kept.write(segment.path, [b"head", second])
    assert content(segment, 1004) == b"head" + second and mappings_of(inode(segment)) == 1
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
    segments = [Segment.create(LARGE) for _ in range(kept_mappings.MAX_KEPT + 1)]
    for segment in segments:
        kept.write(segment.path, [b"x"])
    assert [mappings_of(inode(segment)) for segment in segments] == [0] + [1] * kept_mappings.MAX_KEPT
    kept.close()
    for segment in segments:
        segment.close()


def test_a_mapping_unused_for_longer_than_the_keep_time_goes_at_the_next_write(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = KeptMappings()
    old, new = Segment.create(LARGE), Segment.create(LARGE)
    kept.write(old.path, [b"x"])
    monkeypatch.setattr(kept_mappings, "KEEP_SECONDS", 0.0)
    kept.write(new.path, [b"y"])
    assert mappings_of(inode(old)) == 0 and mappings_of(inode(new)) == 1
    kept.close()
    old.close()
    new.close()


def test_a_segment_of_the_same_path_but_another_inode_is_not_written_through_an_old_mapping() -> None:
    kept = KeptMappings()
    first = Segment.create(LARGE)
    kept.write(first.path, [b"first"])
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
