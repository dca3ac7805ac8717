"""ZMTP 3.1 (RFC 23, with RFC 37's PING and PONG) and its NULL mechanism: one end of one connection.

Bytes in, messages out, and no I/O: the connection's shell (zmtp_router.py, the scheduler's end) feeds what it
reads and writes what `take_output` returns, so the whole wire protocol is testable without sockets. The
scheduler's peers are unchanged libzmq DEALERs (clients, workers' agents, stores, the native worker, a standby
scheduler's probe): a ROUTER codec speaks what libzmq's ROUTER speaks to them, minus CURVE, which stays with
libzmq. A DEALER codec is the other end, for a peer that would speak ZMTP itself (the next step of issue 24).

A peer that breaks the protocol (a bad greeting, another mechanism, a socket type this side does not accept, a
frame over the size limit, reserved flags) fails the codec: `error` says why and nothing more is read, as
libzmq closes such a connection. A frame over `max_frame_bytes` fails it when its header arrives, before its
body is read, as libzmq's MAXMSGSIZE does (per frame).
"""

from __future__ import annotations

from typing import Sequence, Union

Frame = Union[bytes, memoryview]

GREETING_BYTES = 64
# A frame this large is received into a buffer of its own (zero copies beyond the read), and sent without a copy.
LARGE_FRAME_BYTES = 64 * 1024
# Which socket types each side accepts as its peer (RFC 28 and libzmq's compatibility table).
_PEERS = {
    b"ROUTER": frozenset({b"DEALER", b"REQ", b"ROUTER"}),
    b"DEALER": frozenset({b"DEALER", b"REP", b"ROUTER"}),
}

_MORE = 0x01
_LONG = 0x02
_COMMAND = 0x04
_RESERVED = 0xF8
_MAX_PING_CONTEXT = 16
_MAX_IDENTITY_BYTES = 255

_GREETING, _HANDSHAKE, _TRAFFIC, _FAILED = range(4)


def greeting() -> bytes:
    """Signature, version 3.1, mechanism NULL, as-server 0 (NULL has no roles), filler."""
    return b"\xff" + bytes(8) + b"\x7f" + bytes([3, 1]) + b"NULL".ljust(20, b"\x00") + b"\x00" + bytes(31)


def _header(flags: int, size: int) -> bytes:
    if size > 255:
        return bytes([flags | _LONG]) + size.to_bytes(8, "big")
    return bytes([flags, size])


def command(name: bytes, data: bytes = b"") -> bytes:
    body = bytes([len(name)]) + name + data
    return _header(_COMMAND, len(body)) + body


def ready(socket_type: bytes = b"ROUTER", identity: bytes = b"") -> bytes:
    """READY with the socket type, and the identity a ROUTER peer is to route by, if any."""
    properties = _property(b"Socket-Type", socket_type)
    if identity:
        properties += _property(b"Identity", identity)
    return command(b"READY", properties)


def ping(ttl_deciseconds: int = 0, context: bytes = b"") -> bytes:
    """A PING; the TTL (in tenths of a second, at most 65535) asks the peer to close after that much silence."""
    return command(b"PING", min(max(ttl_deciseconds, 0), 0xFFFF).to_bytes(2, "big") + context[:_MAX_PING_CONTEXT])


def error(reason: str) -> bytes:
    text = reason.encode()[:255]
    return command(b"ERROR", bytes([len(text)]) + text)


def _property(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + len(value).to_bytes(4, "big") + value


def encode_message(frames: Sequence[Frame]) -> list[Frame]:
    """One message's wire bytes as pieces for one sendmsg: small frames joined with their headers, large frames
    passed as they are (no copy)."""
    pieces: list[Frame] = []
    joined = bytearray()
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        size = len(frame)
        flags = _MORE if index < last else 0
        if size > 255:
            joined += bytes([flags | _LONG])
            joined += size.to_bytes(8, "big")
        else:
            joined.append(flags)
            joined.append(size)
        if size < LARGE_FRAME_BYTES:
            joined += frame
        else:
            pieces.append(bytes(joined))
            pieces.append(frame)
            joined = bytearray()
    if joined:
        pieces.append(bytes(joined))
    return pieces


class ZmtpCodec:
    """One connection's protocol state, either end: a ROUTER's accepted connection (the default) or a DEALER's
    (`socket_type=b"DEALER"` and the `identity` it asks to be routed by). `feed` returns the complete messages
    (lists of frames) the bytes finished; `take_output` what must be written (the greeting, READY, PONGs, ERROR)
    before anything else. The NULL mechanism has no client or server roles, so both ends do the same."""

    def __init__(self, max_frame_bytes: int = -1, socket_type: bytes = b"ROUTER", identity: bytes = b"") -> None:
        if socket_type not in _PEERS:
            raise ValueError(f"a ZMTP codec for a {socket_type!r} socket is not written; ROUTER and DEALER are")
        self._socket_type = socket_type
        self._own_identity = identity
        # -1 (or less) means no limit, as for zmq.MAXMSGSIZE.
        self._max_frame_bytes = max_frame_bytes if max_frame_bytes >= 0 else None
        self._state = _GREETING
        self._buffer = bytearray()
        self._output = bytearray(greeting())
        self._frames: list[Frame] = []
        # A large frame's body being filled in place: its buffer, bytes filled, and the frame's flags.
        self._body: bytearray | None = None
        self._body_filled = 0
        self._body_flags = 0
        self.error: str | None = None
        self.identity: bytes | None = None  # from READY; b"" if the peer set none
        self.socket_type = b""
        self.peer_major_version = 0
        self.peer_minor_version = 0
        # The TTL of the peer's last PING (seconds; 0 for none): how long it may stay silent before we close.
        self.peer_ttl_seconds = 0.0

    @property
    def ready(self) -> bool:
        """The handshake is done: messages may be sent."""
        return self._state == _TRAFFIC

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    @property
    def speaks_ping(self) -> bool:
        """PING and PONG are ZMTP 3.1's: a 3.0 peer would fail on them."""
        return self.peer_minor_version >= 1 or self.peer_major_version > 3

    def take_output(self) -> bytes:
        if not self._output:
            return b""
        output = bytes(self._output)
        self._output.clear()
        return output

    def body_room(self) -> memoryview | None:
        """While a large frame's body is being received: the rest of its buffer, for the shell to read into."""
        if self._body is None:
            return None
        return memoryview(self._body)[self._body_filled:]

    def body_received(self, count: int) -> list[list[Frame]]:
        """`count` bytes were read into `body_room()`."""
        self._body_filled += count
        messages: list[list[Frame]] = []
        if self._body is not None and self._body_filled == len(self._body):
            self._finish_body(messages)
        return messages

    def feed(self, data: bytes | bytearray | memoryview) -> list[list[Frame]]:
        messages: list[list[Frame]] = []
        if self._state == _FAILED:
            return messages
        if self._body is not None:
            taken = min(len(data), len(self._body) - self._body_filled)
            self._body[self._body_filled:self._body_filled + taken] = data[:taken]
            self._body_filled += taken
            if self._body_filled < len(self._body):
                return messages
            self._finish_body(messages)
            data = data[taken:]
        if self._state == _TRAFFIC and not self._buffer:
            # The common case, whole messages in one read: parsed where they lie, only a partial tail kept.
            with memoryview(data) as view:
                position = self._read_frames(view, messages)
                if position < len(view) and self._state == _TRAFFIC and self._body is None:
                    self._buffer += view[position:]
            return messages
        self._buffer += data
        if self._state == _GREETING and not self._read_greeting():
            return messages
        buffer = self._buffer
        with memoryview(buffer) as view:
            position = self._read_frames(view, messages)
        del buffer[:position]
        return messages

    def _fail(self, reason: str) -> None:
        if self._state in (_GREETING, _HANDSHAKE):
            # RFC 23: a peer that refuses the handshake says why with ERROR, then closes.
            self._output += error(reason)
        self._state = _FAILED
        self.error = reason
        self._buffer = bytearray()
        self._body = None
        self._frames = []

    def _read_greeting(self) -> bool:
        buffer = self._buffer
        if buffer[:1] not in (b"", b"\xff"):
            self._fail("not a ZMTP peer (bad signature)")
            return False
        if len(buffer) >= 10 and not buffer[9] & 0x01:
            self._fail("not a ZMTP peer (bad signature)")
            return False
        if len(buffer) >= 11 and buffer[10] < 3:
            self._fail(f"ZMTP {buffer[10]}.x is not spoken here; 3.0 or later is")
            return False
        if len(buffer) < GREETING_BYTES:
            return False
        self.peer_major_version = buffer[10]
        self.peer_minor_version = buffer[11]
        mechanism = bytes(buffer[12:32]).rstrip(b"\x00")
        if mechanism != b"NULL":
            self._fail(f"security mechanism mismatch: {mechanism.decode(errors='replace')!r} offered, NULL spoken")
            return False
        del buffer[:GREETING_BYTES]
        self._output += ready(self._socket_type, self._own_identity)
        self._state = _HANDSHAKE
        return True

    def _read_frames(self, buffer: memoryview, messages: list[list[Frame]]) -> int:
        """Parse the frames in `buffer`; how many of its bytes were used (all, if the codec failed)."""
        size_limit = self._max_frame_bytes
        end = len(buffer)
        position = 0
        while position < end:
            flags = buffer[position]
            if flags & _RESERVED:
                self._fail(f"a frame with reserved flag bits set ({flags:#04x})")
                return end
            if flags & _LONG:
                if end - position < 9:
                    break
                size = int.from_bytes(buffer[position + 1:position + 9], "big")
                start = position + 9
            else:
                if end - position < 2:
                    break
                size = buffer[position + 1]
                start = position + 2
            if size_limit is not None and size > size_limit:
                self._fail(f"a frame of {size:,} bytes, over the limit of {size_limit:,}")
                return end
            if flags & _COMMAND and flags & _MORE:
                self._fail("a command frame with the MORE flag")
                return end
            stop = start + size
            if stop > end:
                if size >= LARGE_FRAME_BYTES and not flags & _COMMAND and self._state == _TRAFFIC:
                    # Received in place: what is here is copied once, the rest read straight into it.
                    body = bytearray(size)
                    body[:end - start] = buffer[start:end]
                    self._body, self._body_filled, self._body_flags = body, end - start, flags
                    position = end
                break
            body_bytes = bytes(buffer[start:stop])
            position = stop
            if flags & _COMMAND:
                self._on_command(body_bytes)
                if self._state == _FAILED:
                    return end
            elif self._state != _TRAFFIC:
                self._fail("a message before the handshake's READY")
                return end
            else:
                self._frames.append(body_bytes)
                if not flags & _MORE:
                    messages.append(self._frames)
                    self._frames = []
        return position

    def _finish_body(self, messages: list[list[Frame]]) -> None:
        assert self._body is not None
        self._frames.append(memoryview(self._body))
        if not self._body_flags & _MORE:
            messages.append(self._frames)
            self._frames = []
        self._body = None

    def _on_command(self, body: bytes) -> None:
        if not body or body[0] + 1 > len(body):
            self._fail("a malformed command")
            return
        name = body[1:body[0] + 1]
        data = body[body[0] + 1:]
        if name == b"PING":
            if self._state != _TRAFFIC or len(data) < 2:
                self._fail("a malformed PING")
                return
            self.peer_ttl_seconds = int.from_bytes(data[:2], "big") / 10
            self._output += command(b"PONG", data[2:2 + _MAX_PING_CONTEXT])
        elif name == b"READY":
            if self._state != _HANDSHAKE:
                self._fail("READY after the handshake")
                return
            self._on_ready(data)
        elif name == b"ERROR":
            reason = data[1:1 + data[0]].decode(errors="replace") if data else ""
            self._fail(f"the peer sent ERROR: {reason}")
        elif self._state != _TRAFFIC:
            self._fail(f"{name.decode(errors='replace')!r} during the handshake; READY expected")
        # After the handshake, other commands (PONG, SUBSCRIBE, CANCEL, newer ones) mean nothing to a ROUTER.

    def _on_ready(self, data: bytes) -> None:
        properties: dict[bytes, bytes] = {}
        position = 0
        while position < len(data):
            name_end = position + 1 + data[position]
            if name_end + 4 > len(data):
                self._fail("a malformed READY")
                return
            value_end = name_end + 4 + int.from_bytes(data[name_end:name_end + 4], "big")
            if value_end > len(data):
                self._fail("a malformed READY")
                return
            properties[data[position + 1:name_end].lower()] = data[name_end + 4:value_end]
            position = value_end
        socket_type = properties.get(b"socket-type")
        if socket_type not in _PEERS[self._socket_type]:
            peer = (socket_type or b"socket of no type").decode(errors="replace")
            self._fail(f"a {self._socket_type.decode()} does not talk to a {peer}")
            return
        identity = properties.get(b"identity", b"")
        if len(identity) > _MAX_IDENTITY_BYTES:
            self._fail("an identity over 255 bytes")
            return
        self.socket_type = socket_type
        self.identity = identity
        self._state = _TRAFFIC
