"""Making a spare segment's pages in the background (scaler/store/prefault.py), on real memfds."""

from __future__ import annotations

import os
import sys
import time

import pytest

from scaler.store.prefault import Prefaulter
from scaler.store.segment import Segment

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd is Linux only")

SIZE = 16 << 20


def made_bytes(segment: Segment) -> int:
    return os.fstat(segment.fd).st_blocks * 512


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_spare_segment_gets_its_pages_while_the_caller_goes_on() -> None:
    prefaulter = Prefaulter()
    segment = Segment.create(SIZE)
    assert made_bytes(segment) == 0
    prefaulter.prefault(segment.fd, segment.capacity)
    deadline = time.monotonic() + 30
    while made_bytes(segment) < SIZE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert made_bytes(segment) >= SIZE
    prefaulter.close()
    segment.close()


def test_a_segment_freed_before_its_pages_are_made_leaves_no_descriptor_behind() -> None:
    before = open_descriptors()
    prefaulter = Prefaulter()
    segments = [Segment.create(SIZE) for _ in range(8)]
    for segment in segments:
        prefaulter.prefault(segment.fd, segment.capacity)
        segment.close()  # the store freed it at once: the work on its duplicate still ends cleanly
    prefaulter.close()
    assert open_descriptors() == before
