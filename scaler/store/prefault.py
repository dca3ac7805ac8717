"""Making a spare segment's pages in the background, off the store's loop and off the writers' path.

A fresh page of shared memory costs more than copying into it (the kernel zeroes it first): a 50 MB
segment's pages take 13-20 ms to make. The store's core keeps a spare segment ready for the next writer of
a size (store_core.py); this makes its pages on a thread of its own, so that the loop goes on answering
while the kernel works. A writer that gets the spare before all its pages are made just makes the rest
itself: making a page never changes one that exists, so both are safe at once.

The pages are made by faulting them in through a mapping (MADV_POPULATE_WRITE, Linux 5.14), which also
zeroes them. posix_fallocate would be faster here but leaves the zeroing to the first access: a writer
that then maps the segment pays a fault per page again (50 MB: 21 ms, against 8 ms after populating).
Kernels without it get posix_fallocate.

The thread works on a duplicate of the segment's descriptor: if the store frees the segment meanwhile,
the duplicate keeps the memfd whole until the work is done (and then frees it), and a descriptor number
taken by another file in between is never touched.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import queue
import threading

logger = logging.getLogger(__name__)

_JOIN_SECONDS = 5.0
# Not in the mmap module before Python 3.13 (Linux's value); kernels before 5.14 refuse it with EINVAL.
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


class Prefaulter:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._closing = False
        self._thread = threading.Thread(target=self._work, name="store-prefault", daemon=True)
        self._thread.start()

    def prefault(self, fd: int, size: int) -> None:
        """Make the first `size` bytes of pages of the memfd `fd` (soon; the caller may close `fd` at once)."""
        if self._closing:
            return
        self._jobs.put((os.dup(fd), size))

    def close(self) -> None:
        """Stop: jobs not started are dropped (their descriptors closed); waits for the one under way."""
        self._closing = True
        self._jobs.put(None)
        self._thread.join(_JOIN_SECONDS)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fd, size = job
            try:
                if not self._closing:
                    _make_pages(fd, size)
            except OSError as error:  # out of memory for tmpfs, or a kernel without either: the writer makes them
                logger.debug(f"Store: could not make a spare segment's pages: {error}")
            finally:
                os.close(fd)


def _make_pages(fd: int, size: int) -> None:
    mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        mapping.madvise(_MADV_POPULATE_WRITE)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        os.posix_fallocate(fd, 0, size)
    finally:
        mapping.close()
