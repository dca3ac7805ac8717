"""Moving a payload's bytes in bounded pieces: how every read and write of a whole payload is cut up.

Linux moves at most MAX_RW_COUNT bytes (2 GiB less a page: 2,147,479,552) in one read, pread, preadv,
pwritev or process_vm_readv call, and silently moves less when asked for more. A payload of 2 GiB or more
therefore takes several calls: each call here moves at most `CHUNK_BYTES` and the next goes on from where
the last one stopped (a short count is progress, not an error). A call that moves nothing is an error,
never a reason to ask again: the caller hears why at once instead of waiting forever.
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable, Sequence

# The most one call moves: well under MAX_RW_COUNT, and large enough that the calls cost nothing next to the copy.
CHUNK_BYTES = 1 << 30
# The most pieces one call takes (Linux: 1024 iovecs).
MAX_PIECES = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024

# (piece index, start within the piece, length): one part of one piece, moved by one call.
Span = tuple[int, int, int]

_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_new_bytes.restype = ctypes.py_object


class NoProgress(OSError):
    """A call moved nothing although bytes were left: the source or the target ends early."""


def uninitialised_bytes(length: int) -> bytes:
    """A new `bytes` of `length` whose contents are about to be written (by the kernel) before anyone sees it."""
    return _new_bytes(None, length)


def address_of(data: bytes) -> int:
    """Where the bytes of a `bytes` object are in this process's memory (it must stay alive meanwhile)."""
    address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    assert address is not None
    return address


def fill_view(data: bytes) -> memoryview:
    """A writable view of a `bytes` made by uninitialised_bytes, for the kernel to fill before anyone sees it."""
    if not data:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * len(data)).from_address(address_of(data))).cast("B")


def move_in_pieces(
    lengths: Sequence[int], move: Callable[[list[Span], int], int], chunk_bytes: int = CHUNK_BYTES,
    max_pieces: int = MAX_PIECES,
) -> int:
    """Move pieces of `lengths` bytes, in order, with calls of `move(spans, moved_so_far)`: each moves a prefix
    of its spans (at most `chunk_bytes` and `max_pieces` spans in all) and returns how many bytes (a negative
    count is the caller's to raise on). Returns the bytes moved: all of them, or NoProgress is raised."""
    if chunk_bytes <= 0 or max_pieces <= 0:
        raise ValueError(f"a call must move something: chunk_bytes {chunk_bytes}, max_pieces {max_pieces}")
    wanted = sum(lengths)
    index, start, moved = 0, 0, 0
    while moved < wanted:
        spans: list[Span] = []
        budget = chunk_bytes
        piece, offset = index, start
        while piece < len(lengths) and budget and len(spans) < max_pieces:
            take = min(lengths[piece] - offset, budget)
            if take:
                spans.append((piece, offset, take))
                budget -= take
                offset += take
            if offset == lengths[piece]:
                piece, offset = piece + 1, 0
        done = move(spans, moved)
        if done <= 0:
            raise NoProgress(f"moved {moved:,} of {wanted:,} bytes, then nothing more")
        moved += done
        for piece, offset, length in spans:
            if done < length:
                index, start = piece, offset + done
                break
            done -= length
            index, start = piece, offset + length
    return moved
