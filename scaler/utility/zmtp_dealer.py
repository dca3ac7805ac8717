"""A DEALER without a zmq I/O thread: one connection to one address, read and written by the thread that owns
this object, speaking ZMTP 3.1 (NULL mechanism, zmtp_codec.py) to the scheduler's ROUTER (libzmq's or
zmtp_router.py).

What it keeps of libzmq's DEALER, as the worker's agent sets it: it connects in the background and, after a
drop (the peer restarted, or closed us), connects again after a wait that starts at `first_retry_seconds` and
doubles up to `last_retry_seconds` (RECONNECT_IVL, RECONNECT_IVL_MAX); messages sent while no connection is
ready are queued and go out, in order, once one is (SNDHWM 0); a message written in part when its connection
dropped is lost with it, as in libzmq's pipe; `connect` to another address drops what was queued for the old
one (zmq_disconnect); the peer's PINGs are answered, and the TTL a PING asks for is kept (HEARTBEAT_TTL); a
frame over `max_frame_bytes` closes the connection (MAXMSGSIZE); a handshake not done in
`handshake_timeout_seconds` is abandoned and retried (HANDSHAKE_IVL).

Its socket sits in an epoll set whose descriptor (`fileno`) stays the same across reconnections: the owner's
poll watches it, and readable means `receive` has work. `send` queues; `flush` writes. `take_events` gives
what a zmq socket monitor would say of the connection (connected, handshake succeeded or failed,
disconnected), for handshake_failures.HandshakeDiagnosis.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import select
import socket
import time
from typing import Deque, Union

import zmq

from scaler.utility.pending_writes import Piece, write_pending
from scaler.utility.zmtp_codec import Frame, ZmtpCodec, encode_message

logger = logging.getLogger(__name__)

_READ_BYTES = 256 * 1024
_BODY_BYTES_PER_WAKE = 64 * 1024 * 1024  # a large frame's body per receive, so that the owner's timers run
_IN = select.EPOLLIN
_IN_OUT = select.EPOLLIN | select.EPOLLOUT
_GONE = select.EPOLLHUP | select.EPOLLERR
_GREETING_FIRST_BYTES = 11  # the signature (10 bytes) and the major version
_IN_PROGRESS = (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)

# The monitor events given by take_events, as zmq numbers them (zmq_socket_monitor).
EVENT_CONNECTED = int(zmq.EVENT_CONNECTED)
EVENT_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
EVENT_HANDSHAKE_SUCCEEDED = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
EVENT_HANDSHAKE_FAILED_PROTOCOL = int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)


def speaks(address: str) -> bool:
    """Whether this transport can connect to `address` (tcp:// and ipc://; inproc:// and others stay with zmq)."""
    return address.startswith(("tcp://", "ipc://"))


class ZmtpDealer:
    def __init__(
        self, identity: bytes, max_frame_bytes: int = -1, first_retry_seconds: float = 0.1,
        last_retry_seconds: float = 2.0, handshake_timeout_seconds: float = 30.0,
    ) -> None:
        self._identity = identity
        self._max_frame_bytes = max_frame_bytes
        self._first_retry = first_retry_seconds
        self._last_retry = max(last_retry_seconds, first_retry_seconds)
        self._handshake_timeout = handshake_timeout_seconds
        self._epoll = select.epoll()
        self._address = ""
        self._socket: socket.socket | None = None
        self._codec: ZmtpCodec | None = None
        self._greeting_rest = b""  # of our greeting, what waits for the peer's first bytes
        self._connecting = False  # a non-blocking connect not finished yet
        self._opened_at = 0.0
        self._last_heard = 0.0
        self._retry_at: float | None = None  # when no socket: the next attempt
        self._retry_wait = first_retry_seconds
        self._backlog: Deque[list[Frame]] = collections.deque()  # encoded messages no connection began to take
        self._pending: Deque[Piece] = collections.deque()  # bytes owed to the current connection
        self._writing = False  # registered for EPOLLOUT
        self._events: list[tuple[int, int]] = []
        self._read_buffer = bytearray(_READ_BYTES)
        self._read_view = memoryview(self._read_buffer)
        self.dropped_connections = 0
        # A forked child holds copies of the socket and of the epoll set: only the process that made the dealer may
        # end the connection in order or take it out of the set, which would end it (or silence it) for the parent.
        self._owner_pid = os.getpid()

    @property
    def ready(self) -> bool:
        """A connection's handshake is done: what is sent goes out at the next flush."""
        return self._codec is not None and self._codec.ready

    @property
    def address(self) -> str:
        return self._address

    def fileno(self) -> int:
        return self._epoll.fileno()

    def take_events(self) -> list[tuple[int, int]]:
        """(event, value) pairs as a zmq socket monitor would give them, since the last call."""
        events, self._events = self._events, []
        return events

    def connect(self, address: str, now: float) -> None:
        """Connect to `address` (at once), dropping the current connection and anything queued for it."""
        self._close_socket(None)
        self._backlog.clear()
        self._address = address
        self._retry_wait = self._first_retry
        self._attempt(now)

    def close(self) -> None:
        self._close_socket(None)
        self._retry_at = None
        self._epoll.close()

    def send(self, frames: list[Frame]) -> None:
        """Queue a message; `flush` writes it once a connection is ready."""
        # Encoded at once: small frames are copied (a caller may reuse their buffer), large ones kept, as zmq does.
        pieces = encode_message(frames)
        if self._codec is not None and self._codec.ready and not self._backlog:
            self._pending.extend(map(memoryview, pieces))
        else:
            self._backlog.append(pieces)

    def flush(self) -> None:
        if self._pending and not self._writing and self._codec is not None and self._codec.ready:
            self._write()

    def drain(self, timeout_seconds: float) -> bool:
        """Write what is queued, waiting for room in the socket at most `timeout_seconds` in all (libzmq's linger);
        True if all of it went. Before closing: what a ready connection still owes its peer is not cut short."""
        return self._drain_until(time.monotonic() + timeout_seconds)

    def close_in_order(self, timeout_seconds: float) -> bool:
        """Close as a peer that is done, within `timeout_seconds` in all; True if the connection ended in order.

        What is queued is written; then our end is shut for writing (the peer reads a FIN after our last byte),
        and what the peer still sends is read and dropped until it closes its end too. Closing at once instead,
        with bytes unread in the socket (a message the peer sent just before), makes the kernel reset the
        connection, and a reset drops whatever the kernel had not sent yet of ours: a goodbye written last may
        never arrive, and the peer sees the connection reset, as if this process had died."""
        deadline = time.monotonic() + timeout_seconds
        connected = self._socket
        ended = False
        if connected is not None and self.ready and os.getpid() == self._owner_pid and self._drain_until(deadline):
            try:
                connected.shutdown(socket.SHUT_WR)
                ended = _read_until_closed(connected, self._read_buffer, deadline)
            except OSError:
                pass  # reset or gone already: nothing more to say on it
        self.close()
        return ended

    def _drain_until(self, deadline: float) -> bool:
        self.flush()
        while self._pending and self._socket is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([], [self._socket], [], left)
            self._write()
        return not self._pending

    def tick(self, now: float) -> None:
        """A reconnection due, and a connection stuck before its handshake or silent past its peer's TTL, closed."""
        if self._socket is None:
            if self._retry_at is not None and now >= self._retry_at:
                self._attempt(now)
            return
        codec = self._codec
        if codec is None or not codec.ready:
            if now - self._opened_at >= self._handshake_timeout:
                self._drop(now, "no handshake in time")
            return
        if codec.peer_ttl_seconds and now - self._last_heard > codec.peer_ttl_seconds:
            self._drop(now, "silent past the TTL of its ping")
            return
        self.flush()

    def receive(self, now: float) -> list[list[Frame]]:
        """The complete messages the connection holds now (and any connection or write progress made)."""
        messages: list[list[Frame]] = []
        for _fd, events in self._epoll.poll(0):
            if self._socket is None:
                break
            if self._connecting:
                self._finish_connect(now)
                continue
            if events & select.EPOLLOUT:
                self._write()
            if events & (_IN | _GONE) and self._socket is not None:
                self._read(now, messages)
        return messages

    # ------------------------------------------------------------------------------------------ connection

    def _attempt(self, now: float) -> None:
        self._retry_at = None
        try:
            family, target = _resolve(self._address)
            connecting = socket.socket(family, socket.SOCK_STREAM)
        except OSError as error:
            logger.debug(f"ZMTP dealer: cannot connect to {self._address}: {error}")
            self._schedule_retry(now)
            return
        connecting.setblocking(False)
        if family != socket.AF_UNIX:
            connecting.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket = connecting
        self._opened_at = now
        result = connecting.connect_ex(target)
        if result == 0:
            self._epoll.register(connecting.fileno(), _IN)
            self._on_connected(now)
        elif result in _IN_PROGRESS and family != socket.AF_UNIX:
            self._connecting = True
            self._epoll.register(connecting.fileno(), select.EPOLLOUT)
        else:  # refused, no such file, or (AF_UNIX) a full backlog: tried again later, as libzmq does
            self._close_socket(None)
            self._schedule_retry(now)

    def _finish_connect(self, now: float) -> None:
        assert self._socket is not None
        result = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if result in _IN_PROGRESS:
            return
        self._connecting = False
        if result != 0:
            self._close_socket(None)
            self._schedule_retry(now)
            return
        self._epoll.modify(self._socket.fileno(), _IN)
        self._on_connected(now)

    def _on_connected(self, now: float) -> None:
        assert self._socket is not None
        self._events.append((EVENT_CONNECTED, self._socket.fileno()))
        self._codec = ZmtpCodec(self._max_frame_bytes, b"DEALER", self._identity)
        self._last_heard = now
        # The signature and major version first, the rest of the greeting once the peer's first bytes came, as
        # libzmq does: a libzmq peer then sends its whole greeting before it reads our mechanism, and a mechanism
        # mismatch (a CURVE scheduler) is seen here as such rather than as a connection closed mid-greeting.
        greeting = self._codec.take_output()
        self._pending.append(memoryview(greeting[:_GREETING_FIRST_BYTES]))
        self._greeting_rest = greeting[_GREETING_FIRST_BYTES:]
        self._write()

    def _schedule_retry(self, now: float) -> None:
        self._retry_at = now + self._retry_wait
        self._retry_wait = min(self._retry_wait * 2, self._last_retry)

    def _drop(self, now: float, reason: str | None) -> None:
        """The connection is gone: what it was owed is lost with it, the backlog waits for the next one."""
        self.dropped_connections += 1
        self._close_socket(reason)
        self._schedule_retry(now)

    def _close_socket(self, reason: str | None) -> None:
        connected, self._socket = self._socket, None
        if connected is None:
            return
        if reason is not None:
            logger.info(f"ZMTP dealer: closing the connection to {self._address}: {reason}")
        if self._codec is not None:  # it had connected (a monitor tells no disconnection of a failed connect)
            self._events.append((EVENT_DISCONNECTED, connected.fileno()))
        if os.getpid() == self._owner_pid:  # a forked child shares the epoll set: taking the socket out of it
            try:                            # would take it out of the parent's
                self._epoll.unregister(connected.fileno())
            except (OSError, ValueError):
                pass
        connected.close()
        self._connecting = False
        self._codec = None
        self._greeting_rest = b""
        self._pending.clear()
        self._writing = False

    # ------------------------------------------------------------------------------------------ bytes

    def _read(self, now: float, messages: list[list[Frame]]) -> None:
        codec, connected = self._codec, self._socket
        assert codec is not None and connected is not None
        try:
            room = codec.body_room()
            if room is not None:
                count = 0
                while room is not None and count < _BODY_BYTES_PER_WAKE:
                    read = connected.recv_into(room)
                    if not read:
                        break
                    count += read
                    messages.extend(codec.body_received(read))
                    room = codec.body_room()
                if count:
                    self._last_heard = now
                    return
            else:
                read = connected.recv_into(self._read_buffer)
                if read:
                    self._last_heard = now
                    was_ready = codec.ready
                    with self._read_view[:read] as chunk:
                        messages.extend(codec.feed(chunk))
                    self._after_feed(codec, was_ready, now)
                    return
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._drop(now, f"read failed: {error}")
            return
        self._drop(now, None)  # the peer closed its end

    def _after_feed(self, codec: ZmtpCodec, was_ready: bool, now: float) -> None:
        output = codec.take_output()
        if self._greeting_rest:
            self._pending.append(memoryview(self._greeting_rest))
            self._greeting_rest = b""
        if output:
            # The codec's own answers (READY, PONG, ERROR) go at once, ahead of queued messages if it just got ready.
            self._pending.append(memoryview(output))
        if codec.failed:
            if not was_ready:
                self._events.append((EVENT_HANDSHAKE_FAILED_PROTOCOL, _protocol_error(codec.error or "")))
            self._write()
            self._drop(now, codec.error)
            return
        if codec.ready and not was_ready:
            self._events.append((EVENT_HANDSHAKE_SUCCEEDED, 0))
            self._retry_wait = self._first_retry
            while self._backlog:
                self._pending.extend(map(memoryview, self._backlog.popleft()))
        if self._pending and not self._writing:
            self._write()

    def _write(self) -> None:
        connected, pending = self._socket, self._pending
        if connected is None:
            return
        try:
            write_pending(connected, pending)
        except OSError:
            # A broken pipe: the read that follows (EPOLLHUP or EPOLLERR) drops the connection and tells why.
            pending.clear()
            return
        wanted = bool(pending)
        if wanted != self._writing:
            self._writing = wanted
            self._epoll.modify(connected.fileno(), _IN_OUT if wanted else _IN)


def _read_until_closed(connected: socket.socket, buffer: bytearray, deadline: float) -> bool:
    """Read and drop what comes until the peer closes its end (True), or until `deadline` (False)."""
    poller = select.poll()
    poller.register(connected.fileno(), select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        poller.poll(max(1, int(left * 1000)))
        try:
            if not connected.recv_into(buffer):
                return True
        except (BlockingIOError, InterruptedError):
            pass


def _resolve(address: str) -> tuple[int, Union[str, tuple]]:
    scheme, _, rest = address.partition("://")
    if scheme == "ipc" and rest:
        return socket.AF_UNIX, "\0" + rest[1:] if rest.startswith("@") else rest
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        host = host.strip("[]")
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        return found[0][0], found[0][4]
    raise OSError(f"{address}: only tcp:// and ipc:// addresses are spoken to without libzmq")


def _protocol_error(reason: str) -> int:
    """The zmq protocol error a monitor would report for this codec failure (handshake_failures.py reads it)."""
    if reason.startswith("security mechanism mismatch"):
        return int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    return int(zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
