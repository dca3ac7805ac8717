"""Messages of frames over a local stream socket: the link between a worker agent and each of its processors.

The agent makes a socketpair per processor and the processor inherits its end. A zmq message between two
local processes wakes the sender's zmq I/O thread, the receiver's, then the receiver; a socketpair's wakes
the receiver only (benchmarks/transport_ping_pong.py: 80-230 us against 12-17 us a ping-pong).

On the wire each frame is an 8-byte little-endian header, the frame's length with the top bit set when more
frames of the same message follow, then the frame's bytes. Received frames come as bytes, or as read-only
views when large (read straight into a buffer of their own, never copied or grown piece by piece).

The socket is non-blocking. `send` never waits: what the socket does not take at once is kept, in order, and
written by `flush`, which the owner calls when the socket is writable (it polls for that while
`wants_to_write`); `send_all` waits until everything is written instead, for an owner with no loop to come
back to it, and gives up with StreamStuck when a living peer takes nothing for its timeout. The peer's exit
shows as `closed`: reads find the end of the stream, writes find no reader.
"""

from __future__ import annotations

import collections
import math
import select
import socket
import struct
import time
from typing import Deque, Union

from scaler.utility import hop_trace
from scaler.utility.pending_writes import write_pending

Frame = Union[bytes, memoryview]

_HEADER = struct.Struct("<Q")
_HEADER_BYTES = _HEADER.size
_MORE = 1 << 63
_SIZE = _MORE - 1
# A frame this large that has not fully arrived gets a buffer of its own, which the socket then fills directly.
_LARGE_FRAME_BYTES = 64 * 1024
# Messages smaller than this go out as one joined buffer (one copy, one write); larger ones frame by frame.
_JOIN_BYTES = 64 * 1024
_READ_BYTES = 64 * 1024
_POLL_IN = select.POLLIN
_POLL_OUT = select.POLLOUT


class StreamClosed(ConnectionError):
    """The peer is gone (or this end was closed) and no whole message is left to receive."""


class StreamStuck(TimeoutError):
    """`send_all` gave up: the peer lives (its end is open) but took none of our bytes for the whole timeout."""


def _encoded(frames: list[Frame]) -> list[Frame]:
    """One message's bytes on the wire: one buffer for a small message, else headers and frames apart (no copy)."""
    if len(frames) == 1:  # most messages: a Cap'n Proto frame alone
        (frame,) = frames
        if type(frame) is bytes and len(frame) < _JOIN_BYTES:
            return [_HEADER.pack(len(frame)) + frame]
    parts: list[Frame] = []
    total = 0
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        if type(frame) is not bytes:
            view = memoryview(frame)
            if view.ndim != 1 or view.itemsize != 1:
                view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
            frame = view
        size = len(frame)
        parts.append(_HEADER.pack(size | _MORE if index < last else size))
        parts.append(frame)
        total += size
    if total < _JOIN_BYTES:
        return [b"".join(parts)]
    return parts


class FrameStream:
    """One end of the link; owned by one thread (the processor's signal handler reads only when its code may)."""

    def __init__(self, stream: socket.socket) -> None:
        stream.setblocking(False)
        self._socket = stream
        self._fileno = stream.fileno()
        self.closed = False  # no more to read: the peer is gone (or this end was closed)
        self._unwritable = False  # the peer stopped reading: what is sent now is dropped
        # Written in order; the head may be the rest of a buffer the socket took only part of.
        self._pending: Deque[Frame] = collections.deque()
        # Received bytes not yet parsed into frames (never a large frame's body: that goes to _large).
        self._buffer = b""
        self._large: bytearray | None = None
        self._large_view = memoryview(b"")
        self._large_filled = 0
        self._large_more = False
        self._frames: list[Frame] = []  # of the message being received
        self._messages: Deque[list[Frame]] = collections.deque()
        # For the waits of wait_for_input and has_input, and of send_all.
        self._input = select.poll()
        self._input.register(self._fileno, _POLL_IN)
        self._output: select.poll | None = None

    def fileno(self) -> int:
        return self._fileno

    def close(self) -> None:
        """Close this end; unsent and unread messages are dropped."""
        self.closed = self._unwritable = True
        self._pending.clear()
        self._socket.close()

    # ------------------------------------------------------------------------------------------ sending

    @property
    def wants_to_write(self) -> bool:
        return bool(self._pending)

    def send(self, frames: list[Frame]) -> None:
        """Send one message, or what the socket takes of it now; the rest waits for `flush`. Never blocks."""
        if hop_trace.log is not None:
            hop_trace.log("S")
        if self._unwritable:
            return  # nobody reads it: the peer's exit is seen by whoever watches the process
        parts = _encoded(frames)
        if self._pending or len(parts) > 1:
            self._pending.extend(parts)
            self.flush()
            return
        data = parts[0]
        try:
            sent = self._socket.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:  # BrokenPipeError, ConnectionResetError: the peer is gone
            self._cannot_write()
            return
        if sent < len(data):
            self._pending.append(memoryview(data)[sent:])

    def flush(self) -> None:
        """Write what waits, as far as the socket takes it now."""
        try:
            write_pending(self._socket, self._pending)
        except OSError:
            self._cannot_write()

    def send_all(self, frames: list[Frame], timeout: float | None = None) -> None:
        """Send one message and wait until all that waits is written (or the peer is gone).

        With a `timeout`, StreamStuck if the peer takes nothing for that many seconds (a large message to a peer that
        reads slowly is never cut short: each write it takes starts the wait anew); what is unwritten stays pending.
        """
        self.send(frames)
        if not self._pending:
            return
        if self._output is None:
            self._output = select.poll()
            self._output.register(self._fileno, _POLL_OUT)
        wait_ms = None if timeout is None else max(1, math.ceil(timeout * 1000))
        while self._pending:
            # A peer that exits makes the socket writable (with an error): flush then finds it gone.
            if not self._output.poll(wait_ms):
                raise StreamStuck(
                    f"the peer took none of our bytes for {timeout:g}s although its end is open "
                    f"({sum(len(part) for part in self._pending)} bytes wait)"
                )
            self.flush()

    # ------------------------------------------------------------------------------------------ receiving

    def receive_available(self) -> list[list[Frame]]:
        """Every whole message that can be received now, without blocking (the agent's loop, on POLLIN)."""
        while self._read():
            pass
        messages = list(self._messages)
        self._messages.clear()
        return messages

    def has_received(self) -> bool:
        """True if a whole message was read from the socket and waits to be received (no system call)."""
        return bool(self._messages)

    def has_input(self) -> bool:
        """True if a whole message can be received without blocking."""
        if self._messages:
            return True
        # A poll rather than a read that may find nothing: Python raises for that, which costs more.
        if not self.closed and self._input.poll(0):
            while self._read():
                pass
        return bool(self._messages)

    def wait_for_input(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None: without end) for a whole message; False at the timeout or when the
        peer is gone."""
        if self._messages:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if self._input.poll(None if remaining is None else max(0, math.ceil(remaining * 1000))):
                while self._read():
                    pass
                if self._messages:
                    return True
            elif remaining is not None and remaining <= 0:
                break
        return False

    def receive(self) -> list[Frame]:
        """The next message, waiting for it as long as it takes; StreamClosed once the peer is gone."""
        if not self.wait_for_input(None):
            raise StreamClosed("the other end of the stream is gone")
        return self._messages.popleft()

    def _read(self) -> bool:
        """One non-blocking read into the buffers; True if it filled what it asked for (more may be waiting)."""
        if self.closed:
            return False
        large = self._large
        try:
            if large is not None:
                wanted = len(large) - self._large_filled
                count = self._socket.recv_into(self._large_view[self._large_filled:], wanted)
            else:
                wanted = _READ_BYTES
                data = self._socket.recv(_READ_BYTES)
                count = len(data)
        except BlockingIOError:
            return False
        except OSError:  # ConnectionResetError: the peer exited with our bytes unread
            count = 0
        if count == 0:
            self.closed = True  # what was read stays to be received
            self._cannot_write()
            return False
        if large is not None:
            self._large_filled += count
            if self._large_filled == len(large):
                self._large = None  # the bytes after it are still in the socket: the buffer is empty
                self._large_view = memoryview(b"")
                self._frame(memoryview(large).toreadonly(), self._large_more)
        else:
            if self._buffer:
                data = self._buffer + data
            position = self._parse(data)
            self._buffer = data[position:] if position < len(data) else b""
        return count == wanted

    def _parse(self, buffer: bytes) -> int:
        """Take the whole frames at the start of `buffer`; returns where the rest begins."""
        position = 0
        end = len(buffer)
        while end - position >= _HEADER_BYTES:
            (word,) = _HEADER.unpack_from(buffer, position)
            size = word & _SIZE
            start = position + _HEADER_BYTES
            if end - start < size:
                if size >= _LARGE_FRAME_BYTES:
                    large = bytearray(size)
                    large[:end - start] = buffer[start:end]
                    self._large = large
                    self._large_view = memoryview(large)
                    self._large_filled = end - start
                    self._large_more = bool(word & _MORE)
                    position = end
                break
            position = start + size
            self._frame(buffer[start:position], bool(word & _MORE))
        return position

    def _frame(self, frame: Frame, more: bool) -> None:
        self._frames.append(frame)
        if not more:
            self._messages.append(self._frames)
            self._frames = []
            if hop_trace.log is not None:
                hop_trace.log("R")

    def _cannot_write(self) -> None:
        """The peer reads no more; what it sent before may still be read."""
        self._unwritable = True
        self._pending.clear()
