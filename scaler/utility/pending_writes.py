"""Writing a non-blocking socket's queue of byte pieces: as much as the kernel takes now, one sendmsg per batch of
pieces, and the written bytes taken off the queue. The ZMTP router's connections, the ZMTP dealer and the
agent's links to its processors (frame_stream.py) share it."""

from __future__ import annotations

import socket
from itertools import islice
from typing import Deque, Union

Piece = Union[bytes, memoryview]

_MAX_PIECES_PER_WRITE = 512  # below IOV_MAX (1024)


def write_pending(connected: socket.socket, pending: Deque[Piece]) -> int:
    """How many bytes the kernel took; what it did not take stays at the head of `pending`. Raises OSError (not
    for a full socket buffer) when the connection is broken."""
    total = 0
    try:
        while pending:
            pieces = list(islice(pending, _MAX_PIECES_PER_WRITE)) if len(pending) > 1 else [pending[0]]
            written = connected.sendmsg(pieces)
            total += written
            while written:
                head = pending[0]
                if written >= len(head):
                    written -= len(head)
                    pending.popleft()
                else:
                    pending[0] = memoryview(head)[written:]  # a view: a large piece's rest is not copied
                    written = 0
    except (BlockingIOError, InterruptedError):
        pass
    return total
