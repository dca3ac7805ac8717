"""A ROUTER without a zmq I/O thread: the listening socket and every peer's connection are read and written by
the thread that owns this object, speaking ZMTP 3.1 (NULL mechanism, zmtp_codec.py) to unchanged libzmq DEALERs.

What it keeps of libzmq's ROUTER, as the scheduler sets it (PROTOCOL.md §1): a message comes in with its peer's
identity as frame 0, and goes out to the connection holding the identity its frame 0 names, or nowhere if none
does (no ROUTER_MANDATORY); a second connection presenting an identity already connected stays anonymous and its
messages are dropped until the first one leaves (no ROUTER_HANDOVER); a frame over `max_frame_bytes` closes its
connection (MAXMSGSIZE); queues are unlimited unless `max_queued_bytes` is given (SNDHWM 0); each connection is
pinged every `heartbeat_interval_seconds` and closed after `heartbeat_timeout_seconds` without a byte from it
(HEARTBEAT_IVL, HEARTBEAT_TIMEOUT), or `handshake_timeout_seconds` without a handshake (HANDSHAKE_IVL).

A connection closed before its handshake completed (random bytes, a port scanner, a peer speaking another
mechanism) is not logged here: `take_refused` hands its host and the reason to the owner, whose log decides how
often to say so (the scheduler's is rate-limited per host, bad_frame_log.py). Closes after the handshake are one
INFO line each, as only a peer that spoke ZMTP can cause them.

A connection that its peer ended (closed it, or reset it: the process died) while it held an identity is
remembered: if no new connection claims that identity within `lost_grace_seconds`, `take_lost` hands the
identity to the owner, which may take the peer for gone at once instead of at its heartbeat timeout. The grace
lets a live peer that only reconnected (its DEALER does so within a fraction of a second) keep its place. A close
the router decided (silence after a ping, a frame over the limit, its own close) is not reported: a peer cut off
by the network may still come back.

All its sockets sit in one epoll set whose descriptor (`fileno`) the owner's poll watches: readable means
`receive` has work. Or the owner waits with `wait`, one epoll_wait whose events `receive` then serves without
asking the kernel again; descriptors of its own that should end that wait (a stop pipe) it adds with `watch`.
Messages given to `send` are queued and written by `flush`, so that what one wake answers goes out in one write
per peer; what the kernel does not take waits for the socket to be writable.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import select
import socket
import time
from typing import Deque

from scaler.utility.pending_writes import Piece, write_pending
from scaler.utility.zmtp_codec import Frame, ZmtpCodec, encode_message, ping

logger = logging.getLogger(__name__)

_READ_BYTES = 256 * 1024
# A large frame's body is read straight into its buffer, up to this much per wake so that others get their turn.
_BODY_BYTES_PER_WAKE = 64 * 1024 * 1024
_IN = select.EPOLLIN
_IN_OUT = select.EPOLLIN | select.EPOLLOUT
_GONE = select.EPOLLHUP | select.EPOLLERR


class _Connection:
    __slots__ = ("socket", "fd", "codec", "identity", "pending", "queued_bytes", "writing", "accepted",
                 "next_ping", "silent_deadline", "peer", "host")

    def __init__(self, connected: socket.socket, codec: ZmtpCodec, now: float) -> None:
        self.socket = connected
        self.fd = connected.fileno()
        self.codec = codec
        self.identity: bytes | None = None  # while None, the connection is anonymous: its messages are dropped
        self.pending: Deque[Piece] = collections.deque()
        self.queued_bytes = 0
        self.writing = False  # registered for EPOLLOUT
        self.accepted = now
        self.next_ping = 0.0
        self.silent_deadline = 0.0  # after a ping: when silence closes the connection (0: no ping outstanding)
        self.peer = ""  # for the log: the identity once known, else where the connection came from
        self.host = ""  # where the connection came from, without the port: how refusals are counted


class ZmtpRouter:
    def __init__(
        self, address: str, max_frame_bytes: int = -1, heartbeat_interval_seconds: float = 0.0,
        heartbeat_timeout_seconds: float = 0.0, handshake_timeout_seconds: float = 30.0,
        max_queued_bytes: int | None = None, lost_grace_seconds: float = 1.0,
    ) -> None:
        """Binds `address` (tcp:// or ipc://); raises OSError if it cannot. Heartbeat settings of 0 mean none."""
        self._max_frame_bytes = max_frame_bytes
        self._heartbeat_interval = heartbeat_interval_seconds
        self._heartbeat_timeout = heartbeat_timeout_seconds
        self._handshake_timeout = handshake_timeout_seconds
        self._max_queued_bytes = max_queued_bytes
        self._connections: dict[int, _Connection] = {}
        self._by_identity: dict[bytes, _Connection] = {}
        self._dirty: set[_Connection] = set()
        # Sockets reported ready that a call's limit left unread: the next call reads them first.
        self._unserved: dict[int, int] = {}
        # What the last `wait` reported, for the next `receive` (None: it asks epoll itself).
        self._waited: list[tuple[int, int]] | None = None
        self._next_generated_identity = 1
        # Messages of connections whose identity another connection holds: read and dropped (libzmq counts none).
        self.dropped_messages = 0
        self._refused: list[tuple[str, str]] = []
        self._lost_grace = lost_grace_seconds
        # Identities whose connection the peer ended, and when: reported by take_lost unless claimed again.
        self._lost: dict[bytes, float] = {}
        self._read_buffer = bytearray(_READ_BYTES)
        self._read_view = memoryview(self._read_buffer)
        self._ipc_path: str | None = None
        self._listener = _listen(address)
        if self._listener.family == socket.AF_UNIX and not address.startswith("ipc://@"):
            self._ipc_path = address[len("ipc://"):]
        self._epoll = select.epoll()
        self._epoll.register(self._listener.fileno(), _IN)

    @property
    def address(self) -> str:
        """The address bound, with the port the system chose for a tcp port 0."""
        name = self._listener.getsockname()
        if self._listener.family == socket.AF_UNIX:
            return "ipc://" + (name if isinstance(name, str) else "@" + name[1:].decode())
        host = f"[{name[0]}]" if self._listener.family == socket.AF_INET6 else name[0]
        return f"tcp://{host}:{name[1]}"

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def fileno(self) -> int:
        return self._epoll.fileno()

    def watch(self, fd: int) -> None:
        """Let `fd` becoming readable end a `wait` too (the owner's own descriptor: `receive` ignores it)."""
        self._epoll.register(fd, _IN)

    def wait(self, timeout_seconds: float) -> None:
        """Block until a socket or a watched descriptor is ready, or `timeout_seconds` (rounded up to the
        millisecond) pass: one epoll_wait for the owner's whole wait, whose events the next `receive` serves."""
        self._waited = self._epoll.poll(timeout_seconds)

    def close(self) -> None:
        for connection in list(self._connections.values()):
            self._close(connection, None)
        self._epoll.close()
        self._listener.close()
        if self._ipc_path is not None:
            try:
                os.unlink(self._ipc_path)
            except OSError:
                pass

    def take_refused(self) -> list[tuple[str, str]]:
        """The connections closed before their handshake completed since the last call: (host, reason) each."""
        refused, self._refused = self._refused, []
        return refused

    def take_lost(self, now: float) -> list[bytes]:
        """The identities whose connection their peer ended at least `lost_grace_seconds` ago and that no
        connection has claimed since: each reported once."""
        due = [identity for identity, when in self._lost.items() if now - when >= self._lost_grace]
        for identity in due:
            del self._lost[identity]
        return due

    def receive(self, now: float, limit: int | None = None) -> list[list[Frame]]:
        """Whatever the ready sockets hold: new connections accepted, and each complete message as its sender's
        identity followed by its frames, in the order each connection sent them. Once `limit` messages are in,
        the sockets not read yet are read first by the next call, so that a flood can neither hold its owner's
        timers back nor keep the sockets reported last waiting."""
        messages: list[list[Frame]] = []
        listener_fd = self._listener.fileno()
        ready = self._unserved
        waited, self._waited = self._waited, None
        for fd, events in self._epoll.poll(0) if waited is None else waited:
            ready[fd] = ready.get(fd, 0) | events
        self._unserved = {}
        for fd, events in ready.items():
            if limit is not None and len(messages) >= limit:
                self._unserved[fd] = events
                continue
            if fd == listener_fd:
                self._accept(now)
                continue
            connection = self._connections.get(fd)
            if connection is None:
                continue
            if events & select.EPOLLOUT:
                self._write(connection)
            if events & (_IN | _GONE) and fd in self._connections:
                self._read(connection, now, messages)
        return messages

    def send(self, frames: list[Frame]) -> bool:
        """Queue a message for the connection whose identity is frame 0; False (dropped) if none has it."""
        connection = self._by_identity.get(bytes(frames[0]))
        if connection is None:
            return False
        pieces = encode_message(frames[1:])
        size = sum(map(len, pieces))
        if self._max_queued_bytes is not None and connection.queued_bytes + size > self._max_queued_bytes:
            self._close(connection, f"over {self._max_queued_bytes:,} bytes queued for it")
            return False
        connection.pending.extend(map(memoryview, pieces))
        connection.queued_bytes += size
        self._dirty.add(connection)
        return True

    def flush(self) -> None:
        """Write what `send` queued, as far as the kernel takes it now."""
        dirty, self._dirty = self._dirty, set()
        for connection in dirty:
            if connection.fd in self._connections and not connection.writing:
                self._write(connection)

    def tick(self, now: float) -> None:
        """Pings due, and connections silent past their timeout or stuck before their handshake, closed."""
        for connection in list(self._connections.values()):
            codec = connection.codec
            if not codec.ready:
                if now - connection.accepted >= self._handshake_timeout:
                    self._close(connection, "no handshake in time")
                continue
            if connection.silent_deadline and now >= connection.silent_deadline:
                self._close(connection, "silent after a ping")
                continue
            if self._heartbeat_interval > 0 and codec.speaks_ping and now >= connection.next_ping:
                connection.next_ping = now + self._heartbeat_interval
                if self._heartbeat_timeout > 0 and not connection.silent_deadline:
                    connection.silent_deadline = now + self._heartbeat_timeout
                self._queue_raw(connection, ping())
        self.flush()

    def _accept(self, now: float) -> None:
        while True:
            try:
                connected, peer_address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                # Out of descriptors, or the peer gave up before we took it: the others go on.
                logger.warning(f"ZMTP router: could not accept a connection: {error}")
                return
            connected.setblocking(False)
            if connected.family != socket.AF_UNIX:
                connected.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(connected, ZmtpCodec(self._max_frame_bytes), now)
            connection.peer = f"a connection from {peer_address or 'a local process'}"
            connection.host = peer_address[0] if isinstance(peer_address, tuple) else "a local process"
            self._connections[connection.fd] = connection
            self._epoll.register(connection.fd, _IN)
            self._queue_raw(connection, connection.codec.take_output())
            self._write(connection)

    def _read(self, connection: _Connection, now: float, messages: list[list[Frame]]) -> None:
        codec = connection.codec
        received: list[list[Frame]]
        try:
            room = codec.body_room()
            if room is not None:
                count = 0
                while room is not None and count < _BODY_BYTES_PER_WAKE:
                    read = connection.socket.recv_into(room)
                    if not read:
                        break
                    count += read
                    received = codec.body_received(read)
                    if received:
                        self._deliver(connection, received, messages)
                    room = codec.body_room()
                if count:
                    connection.silent_deadline = 0.0
                    return
            else:
                read = connection.socket.recv_into(self._read_buffer)
                if read:
                    connection.silent_deadline = 0.0
                    with self._read_view[:read] as chunk:
                        received = codec.feed(chunk)
                    self._after_feed(connection, received, messages)
                    return
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._close(connection, f"read failed: {error}", lost_at=now)
            return
        self._close(connection, None, lost_at=now)  # the peer closed its end

    def _after_feed(self, connection: _Connection, received: list[list[Frame]], messages: list[list[Frame]]) -> None:
        codec = connection.codec
        output = codec.take_output()
        if output:
            # The codec's own answers (READY, PONG, ERROR) go now: the owner flushes only when it sends something.
            self._queue_raw(connection, output)
            if not connection.writing:
                self._write(connection)
        if codec.failed:
            self._close(connection, codec.error)
            return
        if connection.identity is None and codec.ready:
            self._claim_identity(connection)
        if received:
            self._deliver(connection, received, messages)

    def _deliver(self, connection: _Connection, received: list[list[Frame]], messages: list[list[Frame]]) -> None:
        if connection.identity is None and not self._claim_identity(connection):
            self.dropped_messages += len(received)
            return
        identity = connection.identity
        assert identity is not None
        for frames in received:
            frames.insert(0, identity)
            messages.append(frames)

    def _claim_identity(self, connection: _Connection) -> bool:
        identity = connection.codec.identity
        if not identity:
            # As libzmq's ROUTER names a peer that set none: a zero byte, then a number (never a peer's own).
            identity = b"\x00" + self._next_generated_identity.to_bytes(4, "big")
            self._next_generated_identity += 1
        holder = self._by_identity.get(identity)
        if holder is not None and holder is not connection:
            return False
        self._by_identity[identity] = connection
        self._lost.pop(identity, None)  # back in time: not gone
        connection.identity = identity
        connection.peer = repr(identity)
        return True

    def _queue_raw(self, connection: _Connection, data: bytes) -> None:
        connection.pending.append(memoryview(data))
        connection.queued_bytes += len(data)
        self._dirty.add(connection)

    def _write(self, connection: _Connection) -> None:
        pending = connection.pending
        try:
            connection.queued_bytes -= write_pending(connection.socket, pending)
        except OSError as error:
            self._close(
                connection, f"write failed: {error}" if error.errno != errno.EPIPE else None, lost_at=time.monotonic()
            )
            return
        wanted = bool(pending)
        if wanted != connection.writing:
            connection.writing = wanted
            self._epoll.modify(connection.fd, _IN_OUT if wanted else _IN)

    def _close(self, connection: _Connection, reason: str | None, lost_at: float | None = None) -> None:
        """`lost_at`: the peer ended the connection (then), as opposed to this router closing it."""
        if self._connections.pop(connection.fd, None) is None:
            return
        if reason is not None:
            if connection.codec.ready:
                logger.info(f"ZMTP router: closing {connection.peer}: {reason}")
            else:
                self._refused.append((connection.host, reason))
        if connection.identity is not None and self._by_identity.get(connection.identity) is connection:
            del self._by_identity[connection.identity]
            if lost_at is not None:
                self._lost[connection.identity] = lost_at
        self._dirty.discard(connection)
        try:
            self._epoll.unregister(connection.fd)
        except (OSError, ValueError):
            pass
        connection.socket.close()


def _listen(address: str) -> socket.socket:
    scheme, _, rest = address.partition("://")
    if scheme == "ipc" and rest:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if rest.startswith("@"):
            listener.bind("\0" + rest[1:])
        else:
            # As libzmq does: a file left at the path (by a process that died) is replaced.
            try:
                os.unlink(rest)
            except FileNotFoundError:
                pass
            listener.bind(rest)
        listener.listen(256)
    elif scheme == "tcp":
        host, _, port = rest.rpartition(":")
        host = host.strip("[]")
        host = "" if host in ("*", "0.0.0.0") else host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Port 0 or * (as libzmq writes it): one the system chooses, which `address` then shows.
        listener = socket.create_server((host, 0 if port == "*" else int(port)), family=family, backlog=256)
    else:
        raise OSError(f"{address}: only tcp:// and ipc:// addresses are served without libzmq")
    listener.setblocking(False)
    return listener
