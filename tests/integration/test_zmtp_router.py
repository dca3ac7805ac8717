"""The ZMTP router (scaler/utility/zmtp_router.py) against real libzmq DEALERs over real sockets: what the
scheduler's peers see of it is what they saw of libzmq's ROUTER."""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import socket
import time
from typing import Iterator

import pytest
import zmq

from scaler.utility.zmtp_codec import Frame, ZmtpCodec, encode_message
from scaler.utility.zmtp_router import ZmtpRouter
from tests.integration import zmtp_pump

pytestmark = pytest.mark.timeout(60)


class Pump(zmtp_pump.Pump):
    """The scheduler's loop over its router: a tick every 0.25 s (so that nothing but a tick's own work waits for
    one)."""

    def __init__(self, router: ZmtpRouter) -> None:
        super().__init__(router, tick_seconds=0.25)
        self.router = router


@pytest.fixture
def router() -> Iterator[ZmtpRouter]:
    router = ZmtpRouter("tcp://127.0.0.1:0", max_frame_bytes=64 * 1024 * 1024)
    yield router
    router.close()


def dealer(context: zmq.Context, address: str, identity: bytes, **options: int) -> zmq.Socket:
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.ROUTING_ID, identity)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.RCVTIMEO, 10_000)
    for name, value in options.items():
        peer.setsockopt(getattr(zmq, name), value)
    peer.connect(address)
    return peer


def send(pump: Pump, frames: list[Frame]) -> None:
    assert pump.router.send(frames)
    pump.router.flush()


def test_multipart_messages_go_both_ways_in_order(context: zmq.Context, router: ZmtpRouter) -> None:
    pump = Pump(router)
    peer = dealer(context, router.address, b"W|one")
    for index in range(50):
        peer.send_multipart([b"control %d" % index, b"", b"p" * index * 10])
    pump.until(lambda: len(pump.received) == 50)
    assert pump.received == [[b"W|one", b"control %d" % index, b"", b"p" * index * 10] for index in range(50)]
    for index in range(50):
        assert router.send([b"W|one", b"answer %d" % index, b"x" * 300])
    router.flush()
    assert [peer.recv_multipart() for _ in range(50)] == [[b"answer %d" % index, b"x" * 300] for index in range(50)]
    assert not router.send([b"W|nobody", b"dropped"])


def test_large_messages_both_ways(context: zmq.Context, router: ZmtpRouter) -> None:
    pump = Pump(router)
    peer = dealer(context, router.address, b"C|big")
    payload = os.urandom(1024) * 20_000  # 20 MiB: many reads, most straight into the frame's own buffer
    peer.send_multipart([b"head", payload, b"tail"])
    assert pump.next_message() == [b"C|big", b"head", payload, b"tail"]
    send(pump, [b"C|big", b"back", payload])
    # The kernel takes part of it; the rest goes out as the socket becomes writable, in the owner's loop.
    received: list[list[bytes]] = []
    poller = zmq.Poller()
    poller.register(peer, zmq.POLLIN)

    def answered() -> bool:
        if poller.poll(0):
            received.append(peer.recv_multipart())
        return bool(received)

    pump.until(answered)
    assert received == [[b"back", payload]]


def test_a_peer_reconnecting_with_its_identity_is_routed_to_again(context: zmq.Context, router: ZmtpRouter) -> None:
    pump = Pump(router)
    first = dealer(context, router.address, b"W|same")
    first.send(b"hello")
    assert pump.next_message() == [b"W|same", b"hello"]
    first.close()
    pump.until(lambda: router.connection_count == 0)
    second = dealer(context, router.address, b"W|same")
    second.send(b"again")
    assert pump.next_message() == [b"W|same", b"again"]
    send(pump, [b"W|same", b"welcome back"])
    assert second.recv() == b"welcome back"
    # Back within the grace: its owner never hears it was lost.
    pump.run_for(1.2)
    assert router.take_lost(time.monotonic()) == []


def test_a_second_connection_with_a_taken_identity_is_ignored_until_the_first_leaves(
    context: zmq.Context, router: ZmtpRouter
) -> None:
    """As libzmq's ROUTER without ROUTER_HANDOVER (PROTOCOL.md §1)."""
    pump = Pump(router)
    first = dealer(context, router.address, b"W|twin")
    first.send(b"first")
    assert pump.next_message() == [b"W|twin", b"first"]
    twin = dealer(context, router.address, b"W|twin")
    twin.send(b"ignored")
    pump.until(lambda: router.dropped_messages == 1)
    first.send(b"still first")
    assert pump.next_message() == [b"W|twin", b"still first"]
    assert pump.received == []
    first.close()
    pump.until(lambda: router.connection_count == 1)
    twin.send(b"now mine")
    assert pump.next_message() == [b"W|twin", b"now mine"]


def _connect_and_wait(address: str, ready: multiprocessing.synchronize.Event) -> None:
    context = zmq.Context()
    peer = dealer(context, address, b"W|doomed")
    peer.send(b"alive")
    ready.set()
    time.sleep(60)


def test_a_killed_peers_connection_is_closed(router: ZmtpRouter) -> None:
    pump = Pump(router)
    ready = multiprocessing.get_context("fork").Event()
    child = multiprocessing.get_context("fork").Process(target=_connect_and_wait, args=(router.address, ready))
    child.start()
    try:
        assert pump.next_message() == [b"W|doomed", b"alive"]
        killed = time.monotonic()  # the router cannot see the connection close before this
        os.kill(child.pid, signal.SIGKILL)
        pump.until(lambda: router.connection_count == 0)
        closed = time.monotonic()
        assert not router.send([b"W|doomed", b"too late"])
        # Not back within the grace (a second from when the router saw the close, which is between `killed` and
        # `closed`): its owner is told, once, and may take the peer for gone.
        assert router.take_lost(closed) == []
        lost: list[bytes] = []
        pump.until(lambda: bool(lost.extend(router.take_lost(time.monotonic())) or lost), seconds=5)
        assert lost == [b"W|doomed"] and time.monotonic() - killed >= 1.0
        assert router.take_lost(time.monotonic() + 10) == []
    finally:
        child.kill()
        child.join(timeout=10)


def test_a_frame_over_the_limit_closes_the_connection_and_the_dealer_comes_back(context: zmq.Context) -> None:
    router = ZmtpRouter("tcp://127.0.0.1:0", max_frame_bytes=1000)
    try:
        pump = Pump(router)
        peer = dealer(context, router.address, b"C|greedy", RECONNECT_IVL=10)
        peer.send_multipart([b"ok", b"y" * 1000])
        assert pump.next_message() == [b"C|greedy", b"ok", b"y" * 1000]
        peer.send_multipart([b"too big", b"y" * 1001])
        peer.send(b"after")  # lost with the connection or sent on the next one: libzmq decides, as before
        pump.until(lambda: router.connection_count == 0 or bool(pump.received), seconds=5)
        # Until the dealer has seen its connection close, what it sends may go into that dead connection and be
        # lost with it (as "after" may): it has come back once a message sent again arrives on a new one.
        deadline = time.monotonic() + 10
        while [b"C|greedy", b"reconnected"] not in pump.received:
            assert time.monotonic() < deadline, f"the dealer did not come back; received {pump.received}"
            peer.send(b"reconnected")
            pump.run_for(0.2)
        assert [b"C|greedy", b"too big", b"y" * 1001] not in pump.received
        # The router closed that connection itself: not a peer that went away.
        assert router.take_lost(time.monotonic() + 10) == []
    finally:
        router.close()


def test_pings_keep_a_quiet_dealer_connected_and_its_own_pings_are_answered(context: zmq.Context) -> None:
    router = ZmtpRouter("tcp://127.0.0.1:0", heartbeat_interval_seconds=0.05, heartbeat_timeout_seconds=0.3)
    try:
        pump = Pump(router)
        # The DEALER pings too, and would drop a connection whose pings go unanswered for 200 ms.
        peer = dealer(context, router.address, b"W|quiet", HEARTBEAT_IVL=50, HEARTBEAT_TIMEOUT=200)
        monitor = peer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        peer.send(b"hello")
        assert pump.next_message() == [b"W|quiet", b"hello"]
        stop = time.monotonic() + 1.5
        pump.until(lambda: time.monotonic() > stop, seconds=5)
        assert router.connection_count == 1
        assert monitor.poll(0) == 0, "the DEALER saw its connection drop"
        send(pump, [b"W|quiet", b"still here"])
        assert peer.recv() == b"still here"
        peer.disable_monitor()
        monitor.close()
    finally:
        router.close()


def test_a_peer_that_stops_answering_pings_is_closed() -> None:
    router = ZmtpRouter("tcp://127.0.0.1:0", heartbeat_interval_seconds=0.05, heartbeat_timeout_seconds=0.2)
    host, port = router.address[len("tcp://"):].rsplit(":", 1)
    mute = socket.create_connection((host, int(port)))
    try:
        pump = Pump(router)
        greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 1]) + b"NULL".ljust(20, b"\x00") + bytes(32)
        ready = b"\x04\x1a\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER"
        mute.sendall(greeting + ready)
        pump.until(lambda: router.connection_count == 1)
        # It never reads or answers again.
        pump.until(lambda: router.connection_count == 0, seconds=5)
        # Closed for its silence, which a network cut would cause too: its owner's own timeout decides.
        assert router.take_lost(time.monotonic() + 10) == []
    finally:
        mute.close()
        router.close()


def test_ipc_addresses_are_served(context: zmq.Context, tmp_path: object) -> None:
    router = ZmtpRouter(f"ipc://{tmp_path}/router.sock")
    try:
        pump = Pump(router)
        peer = dealer(context, router.address, b"S|store")
        peer.send_multipart([b"over", b"ipc"])
        assert pump.next_message() == [b"S|store", b"over", b"ipc"]
        send(pump, [b"S|store", b"answer"])
        assert peer.recv() == b"answer"
    finally:
        router.close()
    assert not os.path.exists(f"{tmp_path}/router.sock")


def test_a_peer_that_reads_nothing_is_closed_once_its_queue_passes_the_bound(context: zmq.Context) -> None:
    router = ZmtpRouter("tcp://127.0.0.1:0", max_queued_bytes=8 << 20)
    try:
        pump = Pump(router)
        # zmq stops reading for a DEALER whose application does not once one message waits: TCP's window fills.
        peer = dealer(context, router.address, b"C|asleep", RCVHWM=1)
        peer.send(b"hello")
        assert pump.next_message() == [b"C|asleep", b"hello"]
        chunk = bytes(1 << 20)
        for _ in range(200):
            if not router.send([b"C|asleep", chunk]):
                break
            router.flush()
            router.receive(time.monotonic())  # writable again: the queue drains as far as the peer lets it
        assert router.connection_count == 0
    finally:
        router.close()


def test_a_dealer_codec_over_a_plain_socket_talks_to_a_libzmq_router(context: zmq.Context) -> None:
    """The DEALER end of zmtp_codec.py (what a client or an agent would speak) against libzmq's ROUTER."""
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVTIMEO, 10_000)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    codec = ZmtpCodec(socket_type=b"DEALER", identity=b"C|plain")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
        plain.sendall(codec.take_output())
        received: list[list[Frame]] = []
        while not codec.ready:
            received += codec.feed(plain.recv(65536))
            plain.sendall(codec.take_output())
        plain.sendall(b"".join(encode_message([b"hello", b"y" * 100_000])))
        assert router.recv_multipart() == [b"C|plain", b"hello", b"y" * 100_000]
        router.send_multipart([b"C|plain", b"welcome", b"z" * 70_000])
        while not received:
            received += codec.feed(plain.recv(65536))
        assert [bytes(frame) for frame in received[0]] == [b"welcome", b"z" * 70_000]
    router.close()


def test_many_peers_each_get_their_answers_and_a_limit_leaves_nobody_waiting(context: zmq.Context) -> None:
    router = ZmtpRouter("tcp://127.0.0.1:0")
    try:
        peers = [dealer(context, router.address, b"W|%d" % index) for index in range(40)]
        for index, peer in enumerate(peers):
            for sequence in range(25):
                peer.send_multipart([b"%d" % index, b"%d" % sequence])
        received: list[list[bytes]] = []
        deadline = time.monotonic() + 20
        while len(received) < 40 * 25:
            assert time.monotonic() < deadline, f"{len(received)} of {40 * 25} messages"
            select.select([router.fileno()], [], [], 0.02)
            batch = router.receive(time.monotonic(), limit=7)
            assert len(batch) <= 7 + 25  # the last connection read may finish up to one read's messages
            received += [[bytes(frame) for frame in frames] for frames in batch]
        for index in range(40):
            mine = [frames for frames in received if frames[0] == b"W|%d" % index]
            assert mine == [[b"W|%d" % index, b"%d" % index, b"%d" % sequence] for sequence in range(25)]
            assert router.send([b"W|%d" % index, b"done"])
        router.flush()
        assert [peer.recv() for peer in peers] == [b"done"] * 40
    finally:
        router.close()


def test_wait_serves_the_next_receive_and_a_watched_pipe_ends_it(context: zmq.Context, router: ZmtpRouter) -> None:
    """The scheduler's loop waits with `wait` alone: its events are what `receive` serves, and its stop pipe
    (watched) ends the wait without ever being taken for a connection."""
    read_end, write_end = os.pipe()
    try:
        router.watch(read_end)
        peer = dealer(context, router.address, b"W|one")
        peer.send_multipart([b"hello"])
        received: list[list[bytes]] = []
        deadline = time.monotonic() + 10
        while not received:
            assert time.monotonic() < deadline, "timed out"
            router.wait(0.05)
            received += [[bytes(frame) for frame in frames] for frames in router.receive(time.monotonic())]
        assert received == [[b"W|one", b"hello"]]
        os.write(write_end, b"\0")
        router.wait(120.0)  # ends at once, the pipe being readable: past the test's timeout otherwise
        assert router.receive(time.monotonic()) == []  # the pipe is the owner's: nothing is read from it
        assert os.read(read_end, 1) == b"\0"
        assert router.send([b"W|one", b"answer"])
        router.flush()
        assert peer.recv_multipart() == [b"answer"]
    finally:
        os.close(read_end)
        os.close(write_end)
