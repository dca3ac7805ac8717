"""Spilling: a segment's bytes moved to an unlinked file on disk, and back into a new segment.

Each spilled object is one anonymous file (O_TMPFILE: it never has a name), so nothing is left on
disk when the store exits, also after SIGKILL: the kernel frees the file with its last descriptor.
Where O_TMPFILE is not supported (some file systems), the file is created and unlinked at once.
The bytes move inside the kernel (sendfile), never through a Python buffer.
"""

from __future__ import annotations

import errno
import os
import tempfile

from scaler.store.segment import Segment

_NO_TMPFILE_ERRNOS = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT)


class SpillError(OSError):
    """The spill directory cannot take or give back an object (full, read-only, gone)."""


def _anonymous_file(directory: str, use_tmpfile: bool = True) -> int:
    if use_tmpfile and hasattr(os, "O_TMPFILE"):
        try:
            return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as error:
            if error.errno not in _NO_TMPFILE_ERRNOS:
                raise
    fd, path = tempfile.mkstemp(prefix="scaler-spill-", dir=directory)
    os.unlink(path)
    return fd


def _copy(source_fd: int, target_fd: int, size: int) -> None:
    """Copy `size` bytes from the start of one file to the start of another, inside the kernel."""
    offset = 0
    while offset < size:
        os.lseek(target_fd, offset, os.SEEK_SET)
        sent = os.sendfile(target_fd, source_fd, offset, size - offset)
        if sent == 0:
            raise SpillError(errno.EIO, f"spill: short copy, {offset:,} of {size:,} bytes")
        offset += sent


class SpillFile:
    """One spilled object: its bytes in an unlinked file that lives as long as this object."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    @staticmethod
    def write(segment: Segment, size: int, directory: str, use_tmpfile: bool = True) -> SpillFile:
        """The first `size` bytes of `segment`, now also on disk. Raises SpillError (nothing left behind)."""
        try:
            fd = _anonymous_file(directory, use_tmpfile)
        except OSError as error:
            raise SpillError(error.errno, f"spill: cannot make a file in {directory}: {error.strerror}") from None
        try:
            _copy(segment.fd, fd, size)
        except OSError as error:
            os.close(fd)
            raise SpillError(
                error.errno, f"spill: cannot write {size:,} bytes to {directory}: {error.strerror}"
            ) from None
        return SpillFile(fd, size)

    def read_into(self, segment: Segment) -> None:
        """Copy the spilled bytes back to the start of `segment` (whose capacity must hold them)."""
        if segment.capacity < self.size:
            raise ValueError(f"spill: {self.size:,} bytes do not fit a segment of {segment.capacity:,} bytes")
        try:
            _copy(self.fd, segment.fd, self.size)
        except OSError as error:
            raise SpillError(error.errno, f"spill: cannot read back {self.size:,} bytes: {error.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
