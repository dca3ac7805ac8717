"""The ZMTP 3.1 codec (scaler/utility/zmtp_codec.py) on its own: byte streams as a libzmq DEALER writes them,
cut anywhere, give the same messages; broken or hostile streams fail it with a reason, never an exception.
What a real libzmq peer makes of it is in tests/integration/test_zmtp_router.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.utility import zmtp_codec as z

pytestmark = pytest.mark.timeout(120)


def fuzz(max_examples: int) -> settings:
    return settings(database=None, derandomize=True, deadline=None, max_examples=max_examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def peer_greeting(major: int = 3, minor: int = 1, mechanism: bytes = b"NULL") -> bytes:
    return b"\xff" + bytes(8) + b"\x7f" + bytes([major, minor]) + mechanism.ljust(20, b"\x00") + bytes(32)


def peer_ready(socket_type: bytes = b"DEALER", identity: bytes | None = b"W|host|1") -> bytes:
    properties = bytes([11]) + b"Socket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    if identity is not None:
        properties += bytes([8]) + b"Identity" + len(identity).to_bytes(4, "big") + identity
    return z.command(b"READY", properties)


def wire(messages: list[list[bytes]]) -> bytes:
    return b"".join(b"".join(map(bytes, z.encode_message(frames))) for frames in messages)


def opened(max_frame_bytes: int = -1) -> z.ZmtpCodec:
    codec = z.ZmtpCodec(max_frame_bytes)
    assert codec.feed(peer_greeting() + peer_ready()) == []
    assert codec.ready and not codec.failed
    return codec


def as_bytes(messages: list[list[z.Frame]]) -> list[list[bytes]]:
    return [[bytes(frame) for frame in frames] for frames in messages]


def test_the_handshake_sends_greeting_then_ready_and_learns_the_peers_identity() -> None:
    codec = z.ZmtpCodec()
    first = codec.take_output()
    assert first == z.greeting() and len(first) == z.GREETING_BYTES
    assert first[10:12] == bytes([3, 1]) and first[12:16] == b"NULL"
    codec.feed(peer_greeting())
    assert codec.take_output() == z.ready(b"ROUTER")
    assert not codec.ready
    codec.feed(peer_ready(identity=b"C|me"))
    assert codec.ready and codec.identity == b"C|me" and codec.socket_type == b"DEALER"


def test_a_peer_without_identity_gets_an_empty_one_for_the_shell_to_name() -> None:
    codec = z.ZmtpCodec()
    codec.feed(peer_greeting() + peer_ready(identity=None))
    assert codec.ready and codec.identity == b""


def test_messages_of_small_and_long_frames_come_out_whole() -> None:
    codec = opened()
    sent = [[b"a", b""], [b"x" * 300, b"y" * 70_000, b"z"], [b"\x00" * 255]]
    assert as_bytes(codec.feed(wire(sent))) == sent


def test_a_large_frame_can_be_read_straight_into_its_own_buffer() -> None:
    codec = opened()
    data = wire([[b"head", bytes(range(256)) * 1000]])
    assert codec.feed(data[:100]) == []
    room = codec.body_room()
    assert room is not None and len(room) == 256_000 - (100 - 6 - 9)
    rest = data[100:]
    room[:len(rest)] = rest
    assert as_bytes(codec.body_received(len(rest))) == [[b"head", bytes(range(256)) * 1000]]
    assert codec.body_room() is None


def test_ping_is_answered_with_pong_carrying_its_context() -> None:
    codec = opened()
    codec.take_output()
    assert codec.feed(z.ping(35, b"ctx")) == []
    assert codec.take_output() == z.command(b"PONG", b"ctx")
    assert codec.peer_ttl_seconds == 3.5
    assert codec.speaks_ping


def test_a_zmtp_30_peer_is_accepted_but_not_pinged() -> None:
    codec = z.ZmtpCodec()
    codec.feed(peer_greeting(minor=0) + peer_ready())
    assert codec.ready and not codec.speaks_ping


def test_frames_over_the_limit_fail_at_the_header_before_the_body() -> None:
    codec = opened(max_frame_bytes=1000)
    header = b"\x02" + (1001).to_bytes(8, "big")
    assert codec.feed(header) == []
    assert codec.failed and codec.error is not None and "1,001 bytes" in codec.error
    assert codec.feed(b"more") == []


def test_a_frame_at_the_limit_passes() -> None:
    codec = opened(max_frame_bytes=1000)
    assert as_bytes(codec.feed(wire([[b"x" * 1000]]))) == [[b"x" * 1000]]


@pytest.mark.parametrize(("stream", "reason"), [
    (b"GET / HTTP/1.1\r\n", "bad signature"),
    (b"\xff" + bytes(8) + b"\x7e", "bad signature"),
    (peer_greeting(major=2), "ZMTP 2.x"),
    (peer_greeting(mechanism=b"CURVE"), "mechanism mismatch"),
    (peer_greeting() + peer_ready(socket_type=b"PUB"), "does not talk to a PUB"),
    (peer_greeting() + z.command(b"READY", b""), "socket of no type"),
    (peer_greeting() + z.command(b"READY", b"\x20Socket"), "malformed READY"),
    (peer_greeting() + b"\x00\x01x", "before the handshake"),
    (peer_greeting() + z.ping(), "malformed PING"),
    (peer_greeting() + z.error("go away"), "go away"),
    (peer_greeting() + peer_ready() + b"\x08\x00", "reserved flag"),
    (peer_greeting() + peer_ready() + b"\x05\x00", "MORE flag"),
    (peer_greeting() + peer_ready() + peer_ready(), "READY after"),
    (peer_greeting() + peer_ready() + b"\x04\x02\x09P", "malformed command"),
])
def test_broken_streams_fail_with_a_reason(stream: bytes, reason: str) -> None:
    codec = z.ZmtpCodec()
    codec.take_output()
    assert codec.feed(stream) == []
    assert codec.failed and codec.error is not None and reason in codec.error
    output = codec.take_output()
    handshaking = stream.find(peer_ready()) < 0
    assert (z.command(b"ERROR", b"")[:2] != output[:2]) or handshaking  # ERROR only during the handshake
    if handshaking:
        assert b"ERROR" in output


def test_encoding_keeps_large_frames_uncopied() -> None:
    large = b"L" * z.LARGE_FRAME_BYTES
    pieces = z.encode_message([b"a", large, b"b"])
    assert any(piece is large for piece in pieces)
    assert b"".join(map(bytes, pieces)) == b"\x01\x01a\x03" + len(large).to_bytes(8, "big") + large + b"\x00\x01b"


# Large frames are built from a seed: hypothesis drawing 64 KiB of bytes per frame would take minutes.
large_frames = st.builds(lambda seed, size: (seed * size)[:size], st.binary(min_size=1, max_size=8),
                         st.integers(z.LARGE_FRAME_BYTES - 300, z.LARGE_FRAME_BYTES + 5000))
frames_strategy = st.lists(st.one_of(st.binary(max_size=300), large_frames), min_size=1, max_size=4)


@fuzz(150)
@given(messages=st.lists(frames_strategy, min_size=1, max_size=5), cuts=st.lists(st.integers(0, 1 << 20)),
       pings=st.lists(st.booleans(), max_size=5), direct=st.booleans())
def test_any_chunking_of_a_valid_stream_gives_the_same_messages(
    messages: list[list[bytes]], cuts: list[int], pings: list[bool], direct: bool
) -> None:
    stream = peer_greeting() + peer_ready()
    for index, frames in enumerate(messages):
        stream += wire([frames])
        if index < len(pings) and pings[index]:
            stream += z.ping(0, b"c")
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    codec = z.ZmtpCodec()
    received: list[list[z.Frame]] = []
    for start, stop in zip(points, points[1:]):
        chunk = memoryview(stream)[start:stop]
        room = codec.body_room() if direct else None
        if room is not None:
            # The shell's way for a large body: read into the codec's buffer, then feed what is left over.
            taken = min(len(room), len(chunk))
            room[:taken] = chunk[:taken]
            received += codec.body_received(taken)
            chunk = chunk[taken:]
        received += codec.feed(chunk)
    assert not codec.failed, codec.error
    assert as_bytes(received) == messages
    assert codec.take_output().count(b"PONG") == sum(pings[:len(messages)])


@fuzz(300)
@given(garbage=st.binary(max_size=2000), prefix=st.sampled_from(["none", "greeting", "handshake"]),
       cuts=st.lists(st.integers(0, 4000), max_size=8))
def test_garbage_fails_cleanly_or_waits_never_raises(garbage: bytes, prefix: str, cuts: list[int]) -> None:
    stream = {"none": b"", "greeting": peer_greeting(), "handshake": peer_greeting() + peer_ready()}[prefix] + garbage
    codec = z.ZmtpCodec(max_frame_bytes=1 << 16)
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    for start, stop in zip(points, points[1:]):
        codec.feed(stream[start:stop])
        codec.take_output()
    assert codec.failed == (codec.error is not None)
    if codec.failed:
        assert codec.feed(b"\x00\x01x") == []


def test_a_dealer_codec_and_a_router_codec_talk_to_each_other() -> None:
    dealer = z.ZmtpCodec(socket_type=b"DEALER", identity=b"C|me")
    router = z.ZmtpCodec()
    for _ in range(3):  # greeting, then READY, each way
        router.feed(dealer.take_output())
        dealer.feed(router.take_output())
    assert dealer.ready and router.ready and router.identity == b"C|me" and dealer.socket_type == b"ROUTER"
    assert as_bytes(router.feed(wire([[b"up", b"x" * 300]]))) == [[b"up", b"x" * 300]]
    assert as_bytes(dealer.feed(wire([[b"down"]]))) == [[b"down"]]


def test_a_dealer_codec_refuses_a_peer_it_cannot_talk_to() -> None:
    dealer = z.ZmtpCodec(socket_type=b"DEALER")
    dealer.feed(peer_greeting() + peer_ready(socket_type=b"PUB"))
    assert dealer.failed and dealer.error == "a DEALER does not talk to a PUB"
    with pytest.raises(ValueError):
        z.ZmtpCodec(socket_type=b"PUB")
