"""Small helpers over pyzmq used by every I/O shell."""

from __future__ import annotations

import zmq


def has_input(socket: zmq.Socket) -> bool:
    """True if a message can be received without blocking; cheaper than a poll."""
    return bool(socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)  # type: ignore[operator, arg-type]
