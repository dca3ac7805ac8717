"""Shared-memory segments: memfds owned by the store, reached by other local processes through /proc.

A memfd has no name in any file system: it lives as long as a descriptor or a mapping of it does, so
a store killed with SIGKILL leaves nothing in /dev/shm; a reader's mapping stays valid until the reader
unmaps it. Another process of the same user opens the store's descriptor as `/proc/<pid>/fd/<n>`.

Readers map privately and writable: a task that changes its input array changes only its own pages
(copy-on-write). They do not ask for MAP_POPULATE: on a private writable mapping the kernel populates
by write faults, which copies every page (measured: 200 MB mapped in 130 ms, all of it copied).
They ask instead for the read-only page table entries in one call (MADV_POPULATE_READ, Linux 5.14):
no copy. A reader that only copies an object out (`bytes`) does not map at all: pread copies straight
into the new object (read_copy), which saves making and tearing down a page table entry per page
(50 MB: about 6 ms).
Writers do not map at all: they write with pwritev(2) into the descriptor, the kernel copying straight
into the segment's pages. A shared mapping costs a page table entry per page, made and torn down for every
object (measured on 50 MB: map, write and unmap 11.4 ms on recycled pages, 45 ms on fresh ones; pwritev
10 and 25 ms), and the payload's pieces go uncopied, in one call up to 1 GiB (bounded_io.py).
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
from typing import Any

from scaler.store.bounded_io import CHUNK_BYTES, NoProgress, Span, fill_view, move_in_pieces, uninitialised_bytes

PAGE_BYTES = mmap.PAGESIZE

_AVAILABLE = sys.platform.startswith("linux") and hasattr(os, "memfd_create")
# Python 3.13 can map without keeping a duplicate of the descriptor open for as long as the mapping lives.
_MAP_KEYWORDS: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
# Not in the mmap module before Python 3.13 (Linux's value); kernels before 5.14 refuse it with EINVAL.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


class SharedMemoryUnavailable(RuntimeError):
    """This platform has no memfd shared memory (Linux only); objects must travel by the network path."""


class SegmentUnavailable(OSError):
    """A segment path that cannot be opened: its store is gone, or it was freed."""


def check_available() -> None:
    if not _AVAILABLE:
        raise SharedMemoryUnavailable(
            f"shared-memory segments need Linux (memfd_create); this is {sys.platform}: use the network path"
        )


def capacity_for(size: int) -> int:
    """The capacity of a segment that holds `size` bytes: whole pages, at least one."""
    return max(PAGE_BYTES, -(-size // PAGE_BYTES) * PAGE_BYTES)


class Segment:
    """A memfd of a fixed capacity, owned by this process."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.fd = fd
        self.capacity = capacity
        self._mapping: mmap.mmap | None = None

    @staticmethod
    def create(capacity: int, name: str = "scaler-segment") -> Segment:
        check_available()
        if capacity <= 0:
            raise ValueError(f"a segment needs a positive capacity, got {capacity}")
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, capacity)
            # Nobody may change its size: a reader's mapping beyond a shrunk end would fault (SIGBUS).
            import fcntl

            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        return Segment(fd, capacity)

    @property
    def path(self) -> str:
        """The path another process of this user opens to reach the segment."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def mapping(self) -> mmap.mmap:
        """This process's own shared mapping of the whole segment (made once, kept until close)."""
        if self._mapping is None:
            self._mapping = mmap.mmap(
                self.fd, self.capacity, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE, **_MAP_KEYWORDS
            )
        return self._mapping

    def close(self) -> None:
        """Give the segment up; its memory is freed once no other process has it open or mapped."""
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:
                pass  # a view is still out (zmq finishing a send): the mapping goes with the last view
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _open(path: str, flags: int) -> int:
    check_available()
    try:
        return os.open(path, flags | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ESRCH):
            raise SegmentUnavailable(
                error.errno, f"segment {path} is gone (its store exited, or it was freed)"
            ) from None
        raise SegmentUnavailable(error.errno, f"cannot open segment {path}: {error.strerror}") from None


def write_pieces(path: str, pieces: list[Any]) -> int:
    """Write `pieces` (buffers) one after another from the start of the segment at `path`; the bytes written."""
    fd = open_for_writing(path)
    try:
        return write_descriptor(fd, pieces, path)
    finally:
        os.close(fd)


def open_for_writing(path: str) -> int:
    """A read-write descriptor (a mapping needs both) of the segment at `path` (the caller closes it)."""
    return _open(path, os.O_RDWR)


def write_descriptor(fd: int, pieces: list[Any], path: str, chunk_bytes: int = CHUNK_BYTES) -> int:
    """write_pieces, into a descriptor open for writing (`path` names it in errors), in calls of at most
    `chunk_bytes` (bounded_io.py)."""
    views = [memoryview(piece).cast("B") for piece in pieces]

    def write(spans: list[Span], written: int) -> int:
        return os.pwritev(fd, [views[index][start: start + length] for index, start, length in spans], written)

    try:
        return move_in_pieces([view.nbytes for view in views], write, chunk_bytes)
    except NoProgress as error:
        raise OSError(errno.EIO, f"segment {path}: {error}") from None


def open_for_reading(path: str) -> int:
    """A read-only descriptor of the segment at `path` (the caller closes it)."""
    return _open(path, os.O_RDONLY)


def read_copy(fd: int, length: int, offset: int, chunk_bytes: int = CHUNK_BYTES) -> bytes:
    """`length` bytes of a segment from `offset`, copied into a new `bytes` (pread: no mapping), in calls of at
    most `chunk_bytes` (bounded_io.py)."""
    if length <= chunk_bytes:
        data = os.pread(fd, length, offset)
        if len(data) == length:
            return data
    data = uninitialised_bytes(length)
    view = fill_view(data)

    def read(spans: list[Span], done: int) -> int:
        return os.preadv(fd, [view[start: start + size] for _, start, size in spans], offset + done)

    try:
        move_in_pieces([length], read, chunk_bytes)
    except NoProgress as error:
        raise SegmentUnavailable(errno.EIO, f"segment: {length:,} bytes at {offset:,} could not be read: {error}") \
            from None
    return data


def map_for_reading(path: str, size: int) -> mmap.mmap:
    """A private, writable (copy-on-write) mapping of the first `size` bytes of the segment at `path`."""
    fd = open_for_reading(path)
    try:
        return map_descriptor_for_reading(fd, size)
    finally:
        os.close(fd)


def map_descriptor_for_reading(fd: int, size: int) -> mmap.mmap:
    """map_for_reading, of a descriptor open for reading."""
    mapping = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, **_MAP_KEYWORDS)
    try:
        mapping.madvise(_MADV_POPULATE_READ)
    except OSError:
        pass  # an older kernel: the pages fault in as they are read
    return mapping
