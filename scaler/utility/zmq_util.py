"""Small helpers over pyzmq used by every I/O shell: messages go out and come in as lists of frames."""

from __future__ import annotations

from typing import Union

import zmq

# A frame going out or coming in: bytes, or a zero-copy view of a received frame (the protocol's Buffer).
Frame = Union[bytes, memoryview]


def configure_socket(socket: zmq.Socket, identity: bytes | None = None) -> None:
    """The options every peer's socket gets: unlimited queues, so that zmq never drops a message for a full
    one (a ROUTER would, silently); no lingering at close; the identity the other side routes by, if any."""
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        socket.setsockopt(zmq.IDENTITY, identity)


def has_input(socket: zmq.Socket) -> bool:
    """True if a message can be received without blocking; cheaper than a poll."""
    return bool(socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)  # type: ignore[operator, arg-type]


def send_frames(socket: zmq.Socket, frames: list[Frame], flags: int = 0) -> None:
    if len(frames) == 1:
        socket.send(frames[0], flags)
    else:
        # Large payload frames go out without a copy; zmq keeps them alive until sent.
        socket.send_multipart(frames, flags, copy=False)


def receive_frames(socket: zmq.Socket, flags: int = 0) -> list[Frame]:
    """One message's frames as zero-copy views."""
    return [part.buffer for part in socket.recv_multipart(flags, copy=False)]
