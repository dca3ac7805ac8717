"""Small helpers over pyzmq used by every I/O shell: messages go out and come in as lists of frames."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Union, cast

import zmq

from scaler.utility import hop_trace

# A frame going out or coming in: bytes, or a zero-copy view of a received frame (the protocol's Buffer).
Frame = Union[bytes, memoryview]

# Frames this large are sent and received without a copy (pyzmq's own copy threshold); smaller ones are copied.
_ZERO_COPY_BYTES = 64 * 1024

# The hot calls below go around pyzmq's conveniences, which cost as much as the calls themselves on a small
# message: its constants are enums (each `|` or `&` runs Python code in the enum module, about 1 us), and the
# Python wrapper of Socket.send (routing ids and groups of draft sockets, which we never use) doubles its cost.
_EVENTS = int(zmq.EVENTS)
POLL_IN = _POLLIN = int(zmq.POLLIN)  # for loops that test poll results: `events & zmq.POLLIN` runs enum code
POLL_OUT = int(zmq.POLLOUT)
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_send = cast(Callable[..., Any], zmq.backend.Socket.send)
_get = cast(Callable[[zmq.Socket, int], int], zmq.backend.Socket.get)


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
    return bool(_get(socket, _EVENTS) & _POLLIN)


def wait_for_input(socket: zmq.Socket, timeout_ms: int) -> bool:
    """Wait up to `timeout_ms` for a message to receive; True if one came. Socket.poll makes a Poller per call."""
    return bool(zmq.zmq_poll([(socket, _POLLIN)], timeout_ms))


def send_frames(socket: zmq.Socket, frames: list[Frame], flags: int = 0) -> None:
    """Send one message. Frame by frame rather than with send_multipart, which costs three times as much for
    the two small frames of most messages: small frames are copied (cheaper than zmq's zero-copy bookkeeping),
    large ones go out without a copy and zmq keeps them alive until sent."""
    flags = int(flags)
    more = flags | _SNDMORE
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        _send(socket, frame, more if index < last else flags, len(frame) < _ZERO_COPY_BYTES)


def receive_frames(socket: zmq.Socket, flags: int = 0) -> list[Frame]:
    """One message's frames: small ones as bytes (a control frame must be copied to be word-aligned for Cap'n
    Proto anyway), large ones as zero-copy views. A quarter of recv_multipart's cost for a small message."""
    frames: list[Frame] = []
    while True:
        frame = socket.recv(flags, copy=False)
        frames.append(frame.bytes if len(frame) < _ZERO_COPY_BYTES else frame.buffer)
        if not frame.more:
            return frames


class SendsInOrder:
    """A DEALER's messages, sent without ever blocking: one the socket cannot take yet (no usable connection, as
    while a handshake keeps failing) is kept, with every later one behind it, and sent at a flush, in order. A
    message that may be dropped (a heartbeat) is dropped instead whenever it would have to wait."""

    def __init__(self, socket: zmq.Socket) -> None:
        self._socket = socket
        self._kept: deque[list[Frame]] = deque()
        # Since when the oldest kept message has waited with no message leaving (0.0 while none is kept).
        self.waiting_since = 0.0

    def __bool__(self) -> bool:
        """Whether messages are kept."""
        return bool(self._kept)

    def send(self, frames: list[Frame], may_drop: bool = False) -> None:
        if not self._kept:
            try:
                send_frames(self._socket, frames, _NOBLOCK)
                return
            except zmq.Again:
                self.waiting_since = time.monotonic()
        if not may_drop:
            self._kept.append(frames)

    def flush(self) -> None:
        """Send what was kept, in order, as far as the socket takes it."""
        kept = self._kept
        while kept:
            try:
                send_frames(self._socket, kept[0], _NOBLOCK)
            except zmq.Again:
                return
            kept.popleft()
            self.waiting_since = time.monotonic() if kept else 0.0  # it moves: the next one's wait starts now


def _traced(log: Callable[[str], None]) -> None:
    """With SCALER_HOP_TRACE set (hop_trace.py), each message sent or received is logged. Decided at import: when
    it is off, the functions above are left as they are."""
    global send_frames, receive_frames
    plain_send, plain_receive = send_frames, receive_frames

    def traced_send(socket: zmq.Socket, frames: list[Frame], flags: int = 0) -> None:
        log("S")  # before: a sender is often preempted by its own I/O thread as the send returns
        plain_send(socket, frames, flags)

    def traced_receive(socket: zmq.Socket, flags: int = 0) -> list[Frame]:
        frames = plain_receive(socket, flags)
        log("R")
        return frames

    send_frames, receive_frames = traced_send, traced_receive


if hop_trace.log is not None:
    _traced(hop_trace.log)
