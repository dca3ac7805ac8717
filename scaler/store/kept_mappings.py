"""The writable mappings a local store client keeps of the large segments it wrote into.

A store recycles segments (segment_pool.py): a client that puts one 50 MB object after another gets the
same two to four segments back again and again. Writing into a segment that is still mapped, its page
table filled by the last write, costs only the copy (50 MB: 5 ms), against 10 ms for pwritev, which looks
up every page, or for a fresh mapping, which makes and tears down an entry per page.

A segment seen for the first time is written with pwritev (its pages are new: pwritev fills them faster
than a mapping's faults would) and mapped afterwards, for the next time. A segment is known by its inode,
not its path: a path names a descriptor number of the store, which another segment may take later.

A kept mapping keeps its segment's memory alive even after the store freed the segment, so what is kept
is bounded: at most `MAX_KEPT` mappings and `MAX_KEPT_BYTES` in all, none kept unused for longer than
`KEEP_SECONDS` (looked at on every write), and all of it goes when the client closes.
"""

from __future__ import annotations

import collections
import mmap
import os
import threading
import time
from typing import Any

from scaler.store.segment import open_for_writing, write_descriptor

MIN_KEPT_BYTES = 8 * 2**20  # below this, mapping saves less than it costs
MAX_KEPT = 4
MAX_KEPT_BYTES = 256 * 2**20
KEEP_SECONDS = 10.0


class KeptMappings:
    """Safe to use from several threads: a mapping is taken out while it is written into (the store hands a
    segment to one writer at a time), and put back after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mappings: collections.OrderedDict[tuple[int, int], tuple[mmap.mmap, float]] = collections.OrderedDict()
        self._kept_bytes = 0
        self._closed = False

    def write(self, path: str, pieces: list[Any]) -> None:
        """Write `pieces` one after another from the start of the segment at `path`."""
        fd = open_for_writing(path)
        try:
            status = os.fstat(fd)
            key = (status.st_dev, status.st_ino)
            mapping = self._take(key)
            if mapping is not None:
                try:
                    _write_into(mapping, pieces)
                except BaseException:
                    mapping.close()
                    raise
            else:
                write_descriptor(fd, pieces, path)
                if not MIN_KEPT_BYTES <= status.st_size <= MAX_KEPT_BYTES:
                    return
                mapping = mmap.mmap(fd, status.st_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._keep(key, mapping)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            while self._mappings:
                self._drop_oldest()

    def _take(self, key: tuple[int, int]) -> mmap.mmap | None:
        with self._lock:
            now = time.monotonic()
            while self._mappings and next(iter(self._mappings.values()))[1] < now - KEEP_SECONDS:
                self._drop_oldest()
            kept = self._mappings.pop(key, None)
            if kept is None:
                return None
            self._kept_bytes -= len(kept[0])
            return kept[0]

    def _keep(self, key: tuple[int, int], mapping: mmap.mmap) -> None:
        with self._lock:
            if self._closed:
                mapping.close()
                return
            self._mappings[key] = (mapping, time.monotonic())
            self._kept_bytes += len(mapping)
            while len(self._mappings) > MAX_KEPT or self._kept_bytes > MAX_KEPT_BYTES:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (mapping, _) = self._mappings.popitem(last=False)
        self._kept_bytes -= len(mapping)
        mapping.close()


def _write_into(mapping: mmap.mmap, pieces: list[Any]) -> None:
    view = memoryview(mapping)
    try:
        offset = 0
        for piece in pieces:
            data = memoryview(piece).cast("B")
            view[offset: offset + data.nbytes] = data
            offset += data.nbytes
    finally:
        view.release()
