"""Small helpers over pyzmq used by every I/O shell: messages go out and come in as lists of frames."""

from __future__ import annotations

from typing import Union

import zmq

# A frame going out or coming in: bytes, or a zero-copy view of a received frame (the protocol's Buffer).
Frame = Union[bytes, memoryview]

# Frames this large are sent and received without a copy (pyzmq's own copy threshold); smaller ones are copied.
_ZERO_COPY_BYTES = 64 * 1024


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
    """Send one message. Frame by frame rather than with send_multipart, which costs three times as much for
    the two small frames of most messages: small frames are copied (cheaper than zmq's zero-copy bookkeeping),
    large ones go out without a copy and zmq keeps them alive until sent."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        socket.send(frame, flags | zmq.SNDMORE if index < last else flags, copy=len(frame) < _ZERO_COPY_BYTES)


def receive_frames(socket: zmq.Socket, flags: int = 0) -> list[Frame]:
    """One message's frames: small ones as bytes (a control frame must be copied to be word-aligned for Cap'n
    Proto anyway), large ones as zero-copy views. A quarter of recv_multipart's cost for a small message."""
    frames: list[Frame] = []
    while True:
        frame = socket.recv(flags, copy=False)
        frames.append(frame.bytes if len(frame) < _ZERO_COPY_BYTES else frame.buffer)
        if not frame.more:
            return frames
