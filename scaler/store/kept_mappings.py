"""The writable mappings a local store client keeps of the large segments it wrote into.

A store recycles segments (segment_pool.py): a client that puts one 50 MB object after another gets the
same segments back again and again, as many as its objects in flight (a batch of 20 tasks with a 50 MB
argument each keeps about ten in turn). Writing into a segment that is still mapped, its page table
filled by the last write, costs only the copy (50 MB: 5 ms). pwritev looks up every page (12 ms), and
a fresh mapping fills its page table one fault per page on its first write (35 ms).

So a large segment that comes back (it has its pages: the store recycled it) is mapped, its page table
filled at once (MAP_POPULATE: one call, no fault per page; with the copy, 12 ms), and kept mapped for the
times after. A segment the store just made has no pages yet: pwritev fills them faster than a mapping
would, and a segment used once is not worth a page table. A segment is known by its inode, not its path:
a path names a descriptor number of the store, which another segment may take later.

A kept mapping keeps its segment's memory alive even after the store freed the segment. So a mapping
whose segment the store has freed goes at the next sweep (`sweep`: the client's I/O thread calls it at
every heartbeat; a write does not look, it is on the submitting thread's path), and one unused for
`KEEP_SECONDS` goes at the next write or sweep; at most `MAX_KEPT` mappings and
`MAX_KEPT_BYTES` are kept in all, and all of them go when the client closes.
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os
import threading
import time
from typing import Any

from scaler.store.segment import open_for_writing, write_descriptor

MIN_KEPT_BYTES = 8 * 2**20  # below this, mapping saves less than it costs
MAX_KEPT = 16
MAX_KEPT_BYTES = 2**30
KEEP_SECONDS = 10.0
# Not in the mmap module's constants on every platform; Linux's value.
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)
_STAT_BLOCK_BYTES = 512


@dataclasses.dataclass
class _Kept:
    mapping: mmap.mmap
    path: str
    last_used: float


class KeptMappings:
    """Safe to use from several threads: a mapping is taken out while it is written into (the store hands a
    segment to one writer at a time), and put back after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[tuple[int, int], _Kept] = collections.OrderedDict()  # oldest first
        self._kept_bytes = 0
        self._closed = False

    def write(self, path: str, pieces: list[Any]) -> None:
        """Write `pieces` one after another from the start of the segment at `path`."""
        fd = open_for_writing(path)
        try:
            status = os.fstat(fd)
            key = (status.st_dev, status.st_ino)
            mapping = self._take(key)
            if mapping is None:
                if not MIN_KEPT_BYTES <= status.st_size <= MAX_KEPT_BYTES:
                    write_descriptor(fd, pieces, path)
                    return
                if status.st_blocks * _STAT_BLOCK_BYTES < status.st_size:
                    write_descriptor(fd, pieces, path)  # fresh pages: pwritev makes them faster than a mapping
                    return  # mapped if it comes back: a segment used once is not worth a page table
                mapping = mmap.mmap(
                    fd, status.st_size, flags=mmap.MAP_SHARED | _MAP_POPULATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
                )
            try:
                _write_into(mapping, pieces)
            except BaseException:
                mapping.close()
                raise
        finally:
            os.close(fd)
        self._keep(key, mapping, path)

    def sweep(self) -> None:
        """Let go of the mappings unused for too long, and of those whose segment the store has freed."""
        with self._lock:
            now = time.monotonic()
            for key, kept in list(self._kept.items()):
                if kept.last_used < now - KEEP_SECONDS or not _still_there(kept.path, key):
                    self._drop(key)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            while self._kept:
                self._drop(next(iter(self._kept)))

    def __len__(self) -> int:
        return len(self._kept)

    def _take(self, key: tuple[int, int]) -> mmap.mmap | None:
        with self._lock:
            self._drop_unused_since(time.monotonic() - KEEP_SECONDS)  # a freed segment's mapping waits for the sweep
            kept = self._kept.pop(key, None)
            if kept is None:
                return None
            self._kept_bytes -= len(kept.mapping)
            return kept.mapping

    def _keep(self, key: tuple[int, int], mapping: mmap.mmap, path: str) -> None:
        with self._lock:
            if self._closed:
                mapping.close()
                return
            self._kept[key] = _Kept(mapping, path, time.monotonic())
            self._kept_bytes += len(mapping)
            while len(self._kept) > MAX_KEPT or self._kept_bytes > MAX_KEPT_BYTES:
                self._drop(next(iter(self._kept)))

    def _drop_unused_since(self, since: float) -> None:
        while self._kept and next(iter(self._kept.values())).last_used < since:  # oldest first
            self._drop(next(iter(self._kept)))

    def _drop(self, key: tuple[int, int]) -> None:
        kept = self._kept.pop(key)
        self._kept_bytes -= len(kept.mapping)
        kept.mapping.close()


def _still_there(path: str, key: tuple[int, int]) -> bool:
    """Whether the store still has this segment: its path still names a file with the same inode."""
    try:
        status = os.stat(path)
    except OSError:
        return False
    return (status.st_dev, status.st_ino) == key


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
