"""The link between a worker agent and its processors (scaler/utility/frame_stream.py), over real socketpairs:
messages arrive whole and in order however the bytes are cut, large frames never block a sender that must not
wait, and the end of the peer is told apart from silence."""

from __future__ import annotations

import array
import os
import socket
import threading
from typing import Iterator

import pytest

from scaler.utility.frame_stream import FrameStream, StreamClosed, StreamStuck

# More than a socketpair's buffers hold (a few hundred KiB on Linux), so that writes are partial.
BIG = 8 * 1024 * 1024


@pytest.fixture
def pair() -> Iterator[tuple[FrameStream, FrameStream]]:
    left, right = socket.socketpair()
    streams = FrameStream(left), FrameStream(right)
    yield streams
    for stream in streams:
        stream.close()


def as_bytes(frames: list) -> list[bytes]:
    return [bytes(frame) for frame in frames]


def pump(sender: FrameStream, receiver: FrameStream, wanted: int) -> list[list]:
    """Flush and receive in turns, in one thread, until `wanted` messages came (the agent's loop does the same)."""
    messages: list[list] = []
    for _ in range(100_000):
        sender.flush()
        messages += receiver.receive_available()
        if len(messages) >= wanted:
            return messages
    raise AssertionError(f"only {len(messages)} of {wanted} messages came")


def test_messages_of_several_frames_arrive_whole_and_in_order(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    sent = [[b"control", b"", b"payload"], [b"x" * 100], [b""], [b"a", b"b", b"c", b"d"]]
    for frames in sent:
        left.send(frames)
    assert not left.wants_to_write
    assert right.wait_for_input(10)
    assert [as_bytes(message) for message in right.receive_available()] == sent
    assert not right.has_input()


def test_a_message_cut_anywhere_is_received_only_once_whole(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    # What a stream puts on the wire, read raw from a second pair, then fed to `right` a few bytes at a time.
    wire_in, wire_out = socket.socketpair()
    with wire_in, wire_out:
        writer = FrameStream(wire_in)
        message = [b"head", b"y" * 70_000, b"tail"]  # a large frame among small ones
        writer.send_all(message)
        writer.send_all([b"next"])
        wire = b""
        while len(wire) < 3 * 8 + 70_008 + 8 + 4:
            wire += wire_out.recv(1 << 20)
        raw = socket.socket(fileno=os.dup(left.fileno()))
    with raw:
        first_end = len(wire) - (8 + 4)
        for cut in (1, 7, 8, 9, 4096, 65_536):
            received: list[list] = []
            for start in range(0, len(wire), cut):
                end = min(start + cut, len(wire))
                raw.sendall(wire[start:end])
                received += right.receive_available()
                assert len(received) == (end >= first_end) + (end == len(wire)), f"cut {cut}, after byte {end}"
            assert [as_bytes(frames) for frames in received] == [message, [b"next"]]


def test_a_big_message_never_blocks_the_sender_and_arrives_intact(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    big = os.urandom(BIG)
    left.send([b"control", big])  # returns at once with most of it kept
    assert left.wants_to_write
    left.send([b"after"])  # queued behind it, never ahead
    first, second = pump(left, right, 2)
    assert as_bytes(first) == [b"control", big]
    assert isinstance(first[1], memoryview) and first[1].readonly, "a large frame is a read-only view"
    assert as_bytes(second) == [b"after"]
    assert not left.wants_to_write


def test_send_all_waits_for_a_reader_in_another_thread(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    big = os.urandom(BIG)
    received: list[list] = []
    reader = threading.Thread(target=lambda: received.extend(right.receive() for _ in range(2)))
    reader.start()
    left.send_all([big, b"x"])
    left.send_all([b"second"])
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert [as_bytes(message) for message in received] == [[big, b"x"], [b"second"]]


def test_send_all_gives_up_on_a_living_peer_that_reads_nothing_and_keeps_the_rest(
    pair: tuple[FrameStream, FrameStream]
) -> None:
    left, right = pair
    big = os.urandom(BIG)
    with pytest.raises(StreamStuck, match="took none of our bytes"):
        left.send_all([big, b"x"], timeout=0.2)
    assert left.wants_to_write, "what the peer did not take waits, in order"
    (message,) = pump(left, right, 1)  # a peer that reads again gets the message whole
    assert as_bytes(message) == [big, b"x"]


def test_frames_that_are_views_of_any_format_go_out_as_their_bytes(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    numbers = array.array("i", range(1000))
    large = memoryview(bytearray(b"z" * 100_000))
    left.send([memoryview(numbers), large])
    (message,) = pump(left, right, 1)
    assert as_bytes(message) == [numbers.tobytes(), bytes(large)]


def test_the_peers_end_is_seen_after_what_it_sent(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    right.send([b"unread by the peer"])  # the peer closes with this unread: our reads may meet ECONNRESET
    left.send_all([b"last words"])
    left.close()
    assert right.wait_for_input(10)
    assert as_bytes(right.receive()) == [b"last words"]
    assert not right.wait_for_input(10)
    assert right.closed
    with pytest.raises(StreamClosed):
        right.receive()
    right.send([b"to nobody"])  # dropped, never raised
    right.send_all([b"y" * BIG])
    assert not right.wants_to_write


def test_a_peer_that_ends_in_the_middle_of_a_message_leaves_no_message(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    left.send([b"whole"])
    left.send([b"control", b"w" * BIG])  # only part of it fits in the socket
    left.close()
    messages = []
    while not right.closed:
        messages += right.receive_available()
    messages += right.receive_available()
    assert [as_bytes(message) for message in messages] == [[b"whole"]]
    assert not right.has_input()


def test_wait_for_input_times_out_while_the_peer_is_silent(pair: tuple[FrameStream, FrameStream]) -> None:
    left, right = pair
    left.send([b"part"])
    raw = socket.socket(fileno=os.dup(left.fileno()))
    with raw:
        raw.sendall(b"\x05")  # the first byte of a header: no message
        assert right.wait_for_input(0.05) is True  # the whole one before it
        right.receive()
        assert right.wait_for_input(0.05) is False
        assert not right.closed


def test_has_received_tells_of_messages_read_already_and_never_reads_the_socket(
    pair: tuple[FrameStream, FrameStream]
) -> None:
    left, right = pair
    left.send([b"first"])
    left.send([b"second"])
    assert not right.has_received(), "the messages are in the socket, not read yet"
    assert right.wait_for_input(10)  # one read takes both: they were in the socket before it
    assert right.has_received()
    assert as_bytes(right.receive()) == [b"first"]
    left.send([b"third"])
    assert right.has_received(), "the second is still there"
    assert as_bytes(right.receive()) == [b"second"]
    assert not right.has_received(), "the third waits in the socket: only has_input and the waits read it"
    assert right.has_input()
    assert as_bytes(right.receive()) == [b"third"]
