"""The ZMTP dealer (scaler/utility/zmtp_dealer.py) against a real libzmq ROUTER over real sockets: what the
scheduler sees of it is what it saw of libzmq's DEALER, through restarts of the ROUTER and its death."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Iterator

import pytest
import zmq

from scaler.client.client_link import ZmtpClientLink
from scaler.protocol import messages as m
from scaler.utility.zmtp_codec import encode_message, greeting, ping, ready
from scaler.utility.zmtp_dealer import (
    EVENT_CONNECTED,
    EVENT_DISCONNECTED,
    EVENT_HANDSHAKE_FAILED_PROTOCOL,
    EVENT_HANDSHAKE_SUCCEEDED,
    ZmtpDealer,
)
from tests.integration import zmtp_pump
from tests.protocol.conftest import free_tcp_address

pytestmark = pytest.mark.timeout(60)

IDENTITY = b"W|dealer-test"


class Pump(zmtp_pump.Pump):
    """The worker agent's loop over its dealer: a tick every 0.1 s, a flush and the monitor-like events after each
    pass."""

    def __init__(self, dealer: ZmtpDealer) -> None:
        super().__init__(dealer, tick_seconds=0.1)
        self.dealer = dealer
        self.events: list[int] = []

    def after_pass(self) -> None:
        self.dealer.flush()
        self.events += [event for event, _ in self.dealer.take_events()]


@pytest.fixture
def dealer() -> Iterator[ZmtpDealer]:
    dealer = ZmtpDealer(IDENTITY, first_retry_seconds=0.05, last_retry_seconds=0.4)
    yield dealer
    dealer.close()


def router(context: zmq.Context, address: str) -> zmq.Socket:
    bound = context.socket(zmq.ROUTER)
    bound.setsockopt(zmq.LINGER, 0)
    bound.setsockopt(zmq.RCVTIMEO, 10_000)
    bound.bind(address)
    return bound


def receive_while_pumping(pump: Pump, bound: zmq.Socket, seconds: float = 10.0) -> list[bytes]:
    """A message at the ROUTER, while the dealer's loop runs (its handshake and writes need it)."""
    got: list[list[bytes]] = []

    def arrived() -> bool:
        if bound.poll(0):
            got.append(bound.recv_multipart())
        return bool(got)

    pump.until(arrived, seconds)
    return got[0]


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
def test_messages_go_both_ways_in_order_and_queue_until_connected(
    context: zmq.Context, dealer: ZmtpDealer, scheme: str, tmp_path: str
) -> None:
    address = free_tcp_address() if scheme == "tcp" else f"ipc://{tmp_path}/router.ipc"
    pump = Pump(dealer)
    dealer.connect(address, time.monotonic())
    for index in range(3):  # nothing listens yet: queued, and sent in order once the ROUTER is there
        dealer.send([b"early", str(index).encode()])
    pump.run_for(0.3)
    bound = router(context, address)
    for index in range(3):
        assert receive_while_pumping(pump, bound) == [IDENTITY, b"early", str(index).encode()]
    assert EVENT_CONNECTED in pump.events and EVENT_HANDSHAKE_SUCCEEDED in pump.events
    for index in range(50):
        bound.send_multipart([IDENTITY, b"to-dealer", str(index).encode()])
    pump.until(lambda: len(pump.received) == 50)
    assert pump.received == [[b"to-dealer", str(index).encode()] for index in range(50)]
    bound.close()


def test_large_frames_both_ways(context: zmq.Context, dealer: ZmtpDealer) -> None:
    address = free_tcp_address()
    bound = router(context, address)
    pump = Pump(dealer)
    dealer.connect(address, time.monotonic())
    large = bytes(range(256)) * (40 << 12)  # 40 MiB: many reads and writes each way
    dealer.send([b"head", large, b"tail"])
    assert receive_while_pumping(pump, bound, 30) == [IDENTITY, b"head", large, b"tail"]
    bound.send_multipart([IDENTITY, large[::-1], b"x" * 300])
    pump.until(lambda: bool(pump.received), 30)
    assert pump.received == [[large[::-1], b"x" * 300]]


def test_reconnects_after_the_router_restarts_and_answers_its_pings(context: zmq.Context, dealer: ZmtpDealer) -> None:
    address = free_tcp_address()
    bound = router(context, address)
    pump = Pump(dealer)
    dealer.connect(address, time.monotonic())
    dealer.send([b"one"])
    assert receive_while_pumping(pump, bound) == [IDENTITY, b"one"]
    bound.close()  # the scheduler stops: the connection drops, the dealer retries with backoff
    pump.until(lambda: EVENT_DISCONNECTED in pump.events)
    pump.run_for(0.3)
    dealer.send([b"while-down"])
    bound = router(context, address)
    # libzmq's ROUTER pings its peers when asked (as the scheduler's does): the dealer answers, so it stays.
    bound.setsockopt(zmq.HEARTBEAT_IVL, 100)
    bound.setsockopt(zmq.HEARTBEAT_TIMEOUT, 300)
    assert receive_while_pumping(pump, bound) == [IDENTITY, b"while-down"]
    assert pump.events.count(EVENT_HANDSHAKE_SUCCEEDED) == 2
    bound.send_multipart([IDENTITY, b"back"])
    pump.until(lambda: pump.received == [[b"back"]])
    bound.close()


def test_a_router_silenced_by_a_ttl_ping_is_left_and_reconnected(context: zmq.Context, dealer: ZmtpDealer) -> None:
    """Peer death without a close (a vanished host): the ROUTER asks for a TTL in its pings, then goes silent."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    pump = Pump(dealer)
    dealer.connect(f"tcp://127.0.0.1:{port}", time.monotonic())
    listener.settimeout(10)
    accepted, _ = listener.accept()
    # A ZMTP ROUTER by hand: greeting, READY, then one PING with a TTL of 0.3 s, and silence.
    accepted.sendall(greeting() + ready(b"ROUTER") + ping(3))
    pump.until(lambda: EVENT_HANDSHAKE_SUCCEEDED in pump.events)
    pump.until(lambda: EVENT_DISCONNECTED in pump.events, 5)
    listener.setblocking(False)
    again: list[socket.socket] = []

    def came_back() -> bool:
        try:
            again.append(listener.accept()[0])
        except BlockingIOError:
            pass
        return bool(again)

    pump.until(came_back)
    again[0].close()
    accepted.close()
    listener.close()


def test_a_peer_that_is_not_a_zmtp_router_is_a_failed_handshake(dealer: ZmtpDealer) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    pump = Pump(dealer)
    dealer.connect(f"tcp://127.0.0.1:{listener.getsockname()[1]}", time.monotonic())
    listener.settimeout(10)
    accepted, _ = listener.accept()
    accepted.sendall(b"\xff" + bytes(8) + b"\x7f\x03\x01" + b"CURVE".ljust(20, b"\x00") + bytes(32))
    pump.until(lambda: EVENT_HANDSHAKE_FAILED_PROTOCOL in pump.events)
    accepted.close()
    listener.close()


def test_connect_elsewhere_drops_what_was_queued_for_the_old_address(context: zmq.Context, dealer: ZmtpDealer) -> None:
    """The agent moving to a standby's address (a Reconnect): as zmq_disconnect, the old queue goes, and what is
    sent next reaches the new address only."""
    nobody = free_tcp_address()
    pump = Pump(dealer)
    dealer.connect(nobody, time.monotonic())
    dealer.send([b"for-the-old-one"])
    pump.run_for(0.1)
    address = free_tcp_address()
    bound = router(context, address)
    dealer.connect(address, time.monotonic())
    dealer.send([b"for-the-new-one"])
    assert receive_while_pumping(pump, bound) == [IDENTITY, b"for-the-new-one"]
    pump.run_for(0.2)
    assert not bound.poll(0)
    bound.close()


def test_drain_before_close_delivers_what_the_kernel_could_not_take_at_once(context: zmq.Context) -> None:
    address = free_tcp_address()
    bound = router(context, address)
    dealer = ZmtpDealer(IDENTITY, first_retry_seconds=0.05, last_retry_seconds=0.4)
    pump = Pump(dealer)
    dealer.connect(address, time.monotonic())
    dealer.send([b"hello"])
    assert receive_while_pumping(pump, bound) == [IDENTITY, b"hello"]
    large = bytes(range(256)) * (40 << 12)  # 40 MiB: far more than the socket buffers take in one write
    dealer.send([b"last", large])
    assert dealer.drain(30)
    dealer.close()
    assert bound.recv_multipart() == [IDENTITY, b"last", large]
    bound.close()


def test_drain_gives_up_at_its_timeout_when_the_peer_reads_nothing() -> None:
    # A peer that completes the handshake and then never reads: the socket buffers fill and stay full.
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    dealer = ZmtpDealer(IDENTITY, first_retry_seconds=0.05, last_retry_seconds=0.4)
    try:
        dealer.connect(address, time.monotonic())
        peer, _ = listener.accept()
        peer.sendall(greeting() + ready(b"ROUTER"))
        pump = Pump(dealer)
        pump.until(lambda: EVENT_HANDSHAKE_SUCCEEDED in pump.events, 10)
        dealer.send([b"x" * (64 << 20)])
        started = time.monotonic()
        assert not dealer.drain(0.5)
        assert time.monotonic() - started < 10
        peer.close()
    finally:
        dealer.close()
        listener.close()


def handshaken_peer(dealer: ZmtpDealer) -> tuple[socket.socket, socket.socket]:
    """A raw TCP peer that greets the dealer as a ROUTER would: the listener and its accepted connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    dealer.connect(f"tcp://127.0.0.1:{listener.getsockname()[1]}", time.monotonic())
    peer, _ = listener.accept()
    peer.settimeout(10)
    peer.sendall(greeting() + ready(b"ROUTER"))
    Pump(dealer).until(lambda: dealer.ready, 10)
    return listener, peer


class ReadUntilClosed:
    """On a thread, what a raw peer receives until the connection ends: in order (its end read) or by an error."""

    def __init__(self, peer: socket.socket) -> None:
        self.got = bytearray()
        self.ended: list[str] = []
        self._peer = peer
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := self._peer.recv(65536):
                self.got.extend(chunk)
            self.ended.append("closed in order")
        except OSError as error:
            self.ended.append(repr(error))
        self._peer.close()  # as the scheduler's router does once it reads the end

    def join(self) -> None:
        self._thread.join(10)


def test_close_in_order_ends_with_the_peer_despite_unread_bytes_and_its_last_message_arrives() -> None:
    dealer = ZmtpDealer(IDENTITY)
    listener, peer = handshaken_peer(dealer)
    try:
        # The dealer reads none of this before it closes: a plain close (drain, then close) resets the connection.
        peer.sendall(encode_message_bytes([b"unread", b"x" * 100_000]))
        time.sleep(0.1)  # not a bound: time for the bytes to reach the dealer's socket, as the case needs
        reader = ReadUntilClosed(peer)
        dealer.send([b"goodbye"])
        assert dealer.close_in_order(10)
        reader.join()
        assert reader.ended == ["closed in order"]
        assert bytes(reader.got).endswith(encode_message_bytes([b"goodbye"]))
    finally:
        dealer.close()
        listener.close()


def test_close_in_order_gives_up_at_its_timeout_when_the_peer_never_closes() -> None:
    dealer = ZmtpDealer(IDENTITY)
    listener, peer = handshaken_peer(dealer)
    try:
        dealer.send([b"goodbye"])
        assert not dealer.close_in_order(0.3)  # (the test's timeout would catch a wait with no end)
    finally:
        dealer.close()
        peer.close()
        listener.close()


def encode_message_bytes(frames: list[bytes]) -> bytes:
    return b"".join(bytes(piece) for piece in encode_message(frames))


def test_a_forked_child_ending_its_copy_leaves_the_parents_connection_open() -> None:
    """A forked child holds the parent's socket: its close must not shut the connection the parent still uses."""
    dealer = ZmtpDealer(IDENTITY)
    listener, peer = handshaken_peer(dealer)
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            dealer.close_in_order(1.0)
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        peer.sendall(encode_message_bytes([b"still", b"there"]))
        pump = Pump(dealer)
        pump.until(lambda: bool(pump.received), 10)
        assert pump.received == [[b"still", b"there"]]
        dealer.send([b"and", b"here"])
        dealer.flush()
        expected = encode_message_bytes([b"and", b"here"])
        got = b""  # after the dealer's greeting, which this peer never read
        while not got.endswith(expected):
            chunk = peer.recv(65536)
            assert chunk, "the connection ended"
            got += chunk
    finally:
        dealer.close()
        peer.close()
        listener.close()


def test_a_client_link_closes_in_order_despite_unread_bytes_and_its_goodbye_arrives() -> None:
    """The client's ZMTP link ends as the agent's does (close_in_order), not with a reset that can drop its goodbye."""
    link = ZmtpClientLink("tcp://127.0.0.1:1", IDENTITY, time.monotonic())
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    link.connect(f"tcp://127.0.0.1:{listener.getsockname()[1]}", time.monotonic())
    peer, _ = listener.accept()
    peer.settimeout(10)
    try:
        peer.sendall(greeting() + ready(b"ROUTER"))
        deadline = time.monotonic() + 10
        while not link._dealer.ready and time.monotonic() < deadline:
            link.wait_input(0.05)
            link.receive(time.monotonic())
        assert link._dealer.ready
        peer.sendall(encode_message_bytes([b"unread", b"x" * 100_000]))
        time.sleep(0.1)  # not a bound: time for the bytes to reach the link's socket, as the case needs
        reader = ReadUntilClosed(peer)
        link.send(m.Disconnect(reason="client leaving"))
        link.close(10)
        reader.join()
        assert reader.ended == ["closed in order"]
        assert bytes(reader.got).endswith(encode_message_bytes(m.encode(m.Disconnect(reason="client leaving"))))
    finally:
        peer.close()
        listener.close()
