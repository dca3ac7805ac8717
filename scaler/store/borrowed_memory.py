"""Reading an object out of another local process's memory: how a borrowed object is read.

A client that puts a large argument made of whole `bytes` does not copy it into a segment: it lends it
(data.capnp Lend), keeping the `bytes` alive and unchanged until it lets the object go, and its readers
copy them straight into their own new `bytes` with process_vm_readv(2) (cross-memory attach, which MPI
implementations use for large messages within a node). One copy in all, where a segment costs two (into
shared memory, out of it) and, the first time, a fresh shared page for every 4 KiB: on this project's
machines a fresh page costs about ten times the copy of its bytes.

The kernel lets one process read another's memory when it may ptrace it: the same user, and Yama's
ptrace_scope or a container's seccomp profile permitting. Where it does not, a read raises LoanUnreadable
and the caller takes another path (the store refuses the loan, so the writer uses a segment; a reader asks
the store, which reads it).

Validity: the lender keeps a random cookie at a fixed address for exactly as long as the object's bytes
are valid, and clears it before it lets them go (lent_objects.py). A reader reads the cookie last, after
all the bytes (in the last of the bounded calls that read them, bounded_io.py): if it still matches, the
bytes were valid while they were read. A pid that now
names another process, or one of another pid namespace, fails the same check.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from scaler.protocol import data_messages as d
from scaler.protocol import stored_payload
from scaler.store.bounded_io import CHUNK_BYTES, NoProgress, Span, address_of, move_in_pieces, uninitialised_bytes

COOKIE_BYTES = 16


class LoanUnreadable(OSError):
    """The lender's memory cannot be read (not permitted, the process is gone), or the object was let go."""


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _process_vm_readv():  # type: ignore[no-untyped-def]
    if not sys.platform.startswith("linux"):
        return None
    try:
        # glibc's name first: find_library runs `ldconfig -p`, a child process every store, processor and
        # client would wait for at import.
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        from ctypes.util import find_library

        try:
            libc = ctypes.CDLL(find_library("c"), use_errno=True)
        except OSError:
            return None
    try:
        function = libc.process_vm_readv
    except AttributeError:
        return None
    iovecs = ctypes.POINTER(_IoVec)
    function.argtypes = [ctypes.c_int, iovecs, ctypes.c_ulong, iovecs, ctypes.c_ulong, ctypes.c_ulong]
    function.restype = ctypes.c_ssize_t
    return function


_READV = _process_vm_readv()


def available() -> bool:
    """Whether this platform has process_vm_readv at all (Linux); permission is known only by trying."""
    return _READV is not None


def _read(
    pid: int, targets: list[tuple[int, int]], sources: list[tuple[int, int]], chunk_bytes: int = CHUNK_BYTES
) -> None:
    """Copy each source range of process `pid` into the target range of this process of the same length, in
    calls of at most `chunk_bytes` (bounded_io.py), in order: the last range (the cookie) is read last."""
    if _READV is None:
        raise LoanUnreadable(errno.ENOSYS, "process_vm_readv is Linux only")

    def read(spans: list[Span], _: int) -> int:
        count = len(spans)
        local = (_IoVec * count)(*(_IoVec(targets[i][0] + start, length) for i, start, length in spans))
        remote = (_IoVec * count)(*(_IoVec(sources[i][0] + start, length) for i, start, length in spans))
        done = _READV(pid, local, count, remote, count, 0)
        if done < 0:
            number = ctypes.get_errno()
            raise LoanUnreadable(number, f"cannot read the memory of process {pid}: {os.strerror(number)}")
        return done

    try:
        move_in_pieces([length for _, length in sources], read, chunk_bytes)
    except NoProgress as error:
        raise LoanUnreadable(errno.EFAULT, f"process {pid} let the object go while it was read: {error}") from None


def _check_cookie(loan: d.MemoryLoan, read: bytes) -> None:
    if read != loan.cookie:
        raise LoanUnreadable(errno.ESTALE, f"process {loan.pid} no longer lends this object")


def check(loan: d.MemoryLoan) -> None:
    """Raise LoanUnreadable unless this process can read the loan's cookie, and it matches."""
    cookie = uninitialised_bytes(len(loan.cookie))
    _read(loan.pid, [(address_of(cookie), len(cookie))], [(loan.cookie_address, len(loan.cookie))])
    _check_cookie(loan, cookie)


def read_parts(loan: d.MemoryLoan, chunk_bytes: int = CHUNK_BYTES) -> list[bytes]:
    """Each range of the loan copied into a new `bytes` (the main part, then each buffer)."""
    parts = [uninitialised_bytes(length) for _, length in loan.ranges]
    cookie = uninitialised_bytes(len(loan.cookie))
    targets = [(address_of(part), len(part)) for part in parts] + [(address_of(cookie), len(cookie))]
    _read(loan.pid, targets, [*loan.ranges, (loan.cookie_address, len(loan.cookie))], chunk_bytes)
    _check_cookie(loan, cookie)
    return parts


def read_payload(loan: d.MemoryLoan, size: int, chunk_bytes: int = CHUNK_BYTES) -> bytearray:
    """The loan's whole stored payload (header, main part, buffers at their offsets) in one new buffer: what
    a remote reader is sent."""
    layout = loan_layout(loan, size)
    payload = bytearray(size)
    payload[: len(loan.header)] = loan.header
    base = ctypes.addressof((ctypes.c_char * size).from_buffer(payload)) if size else 0
    offsets = [layout.main_offset] + [offset for offset, _ in layout.buffers]
    targets = [(base + offset, length) for offset, (_, length) in zip(offsets, loan.ranges)]
    cookie = uninitialised_bytes(len(loan.cookie))
    _read(loan.pid, [*targets, (address_of(cookie), len(cookie))],
          [*loan.ranges, (loan.cookie_address, len(loan.cookie))], chunk_bytes)
    _check_cookie(loan, cookie)
    return payload


def loan_layout(loan: d.MemoryLoan, size: int) -> stored_payload.PayloadLayout:
    """The payload layout the loan's header gives; StoredPayloadError unless its ranges are its parts."""
    layout = stored_payload.read_layout(loan.header, size)
    lengths = [layout.main_length] + [length for _, length in layout.buffers]
    if layout.total_length != size or [length for _, length in loan.ranges] != lengths:
        raise stored_payload.StoredPayloadError("the loan's ranges are not the parts its header names")
    return layout
