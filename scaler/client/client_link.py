"""The client's end of its link to the scheduler: ZMTP spoken by the thread that owns the link
(scaler/utility/zmtp_dealer.py, issue 24), as scheduler_link.py does for the worker's agent, or libzmq's DEALER.

By default the client speaks ZMTP itself to tcp:// and ipc:// addresses: a message then leaves on the write of
the thread that sends it, and arrives on the read of the thread that polls the link, with no zmq I/O thread
woken at this end. CURVE keys and other kinds of address need libzmq, and `SCALER_CLIENT_TRANSPORT=zmq` asks for
it. The scheduler never knows the difference: the wire is ZMTP either way.

Both links take a message and keep it, in order, while no connection can take it (never blocking: the owner's
timeouts must run); both give what arrived as decoded messages; both feed a HandshakeDiagnosis (the libzmq one
from the socket's monitor, the ZMTP one from the dealer's own events), which connection.py reads. Only the
thread that owns the client's core (connection.py) calls a link.
"""

from __future__ import annotations

import logging
import os
import select
from typing import Any, Union

import zmq

from scaler.protocol import messages as m
from scaler.protocol.scheduler_session import LAST_HELLO_RETRY_SECONDS
from scaler.utility import hop_trace
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.handshake_failures import HandshakeDiagnosis, HandshakeWatch
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.zmq_util import (
    SendsInOrder,
    configure_socket,
    has_input,
    receive_frames,
    wait_for_input,
)
from scaler.utility.zmtp_dealer import ZmtpDealer, speaks

logger = logging.getLogger(__name__)

TRANSPORT_ENV = "SCALER_CLIENT_TRANSPORT"

# While a ZMTP connection is not ready, how often its owner looks again (the dealer retries from 0.1 s on).
_NOT_READY_TICK_SECONDS = 0.1


def zmtp_wanted(address: str, curve_keys: PeerKeys | None) -> bool:
    """Whether the ZMTP link is wanted (unless the environment asks for libzmq) and can serve `address` (all of
    them, with standbys)."""
    wanted = os.environ.get(TRANSPORT_ENV, "zmtp")
    if wanted not in ("zmq", "zmtp"):
        logger.warning(f"Client: {TRANSPORT_ENV}={wanted!r} is neither zmq nor zmtp; using zmq")
        return False
    return wanted == "zmtp" and curve_keys is None and all(map(speaks, parse_scheduler_addresses(address)))


def _decode(frames: list[m.Buffer], into: list[m.Message]) -> None:
    try:
        into.append(m.decode(frames))
    except m.ProtocolDecodeError as error:
        logger.warning(f"Client: dropped an undecodable message from the scheduler: {error}")


class ZmqClientLink:
    """libzmq's DEALER, its monitor, and the messages it could not take yet (no usable connection)."""

    owns_io_thread = True  # zmq's: a message sent here is written by it

    def __init__(self, all_addresses: str, identity: bytes, curve_keys: PeerKeys | None, now: float) -> None:
        self._context = zmq.Context(io_threads=1)
        self.socket = self._context.socket(zmq.DEALER)
        configure_socket(self.socket, identity)
        self._sends = SendsInOrder(self.socket)
        self._watch: HandshakeWatch | None = None
        try:
            if curve_keys is not None:
                secure_peer(self.socket, curve_keys)
            self._watch = HandshakeWatch(
                self.socket, all_addresses, now, role="client", secured=curve_keys is not None
            )
        except BaseException:
            self.close(0.0)
            raise
        self.diagnosis = self._watch.diagnosis
        self._connected_to = ""

    def pollables(self) -> list[Any]:
        monitor = self._watch.monitor_socket if self._watch is not None else None
        return [self.socket] if monitor is None else [self.socket, monitor]

    @property
    def wants_out(self) -> bool:
        """Whether the owner's poll should wait for the socket to take what was kept."""
        return bool(self._sends)

    def connect(self, address: str, now: float) -> None:
        if self._connected_to:
            self.socket.disconnect(self._connected_to)
        self._connected_to = address
        self.socket.connect(address)

    def send(self, message: m.Message) -> None:
        """Send now, or keep it (after what was kept before) while zmq has no connection to take it."""
        self._sends.send(m.encode(message))

    def send_heartbeat(self) -> None:
        self._sends.send(m.encode(m.Heartbeat()), may_drop=True)  # one that cannot leave now is not worth keeping

    def flush(self) -> None:
        """Send what was kept, in order, as far as the socket takes it."""
        self._sends.flush()

    def receive(self, now: float) -> list[m.Message]:
        messages: list[m.Message] = []
        while has_input(self.socket):
            _decode(receive_frames(self.socket), messages)
        return messages

    def wait_input(self, timeout: float) -> bool:
        return wait_for_input(self.socket, max(1, int(timeout * 1000)))

    def handshake_problems(self, now: float) -> list[str]:
        return self._watch.poll(now) if self._watch is not None else []

    def seconds_to_tick(self) -> float:
        return 3600.0  # zmq reconnects on its own

    def close(self, linger_seconds: float) -> None:
        if self._watch is not None:
            self._watch.close()
        self.socket.close(linger=int(linger_seconds * 1000))
        self._context.term()


class ZmtpClientLink:
    """The ZMTP dealer: its epoll descriptor is what the owner polls; readable means `receive` has work."""

    owns_io_thread = False

    def __init__(self, all_addresses: str, identity: bytes, now: float) -> None:
        self._dealer = ZmtpDealer(identity, last_retry_seconds=LAST_HELLO_RETRY_SECONDS)
        self._fileno = self._dealer.fileno()
        self.diagnosis = HandshakeDiagnosis(all_addresses, "the scheduler", "client", False, now)
        self._poll = select.poll()
        self._poll.register(self._fileno, select.POLLIN)

    def pollables(self) -> list[Any]:
        return [self._fileno]

    wants_out = False  # the dealer's epoll set watches for room to write itself

    def connect(self, address: str, now: float) -> None:
        self._dealer.connect(address, now)

    def send(self, message: m.Message) -> None:
        """Queued, in order: `flush` writes it once a connection is ready (what the kernel does not take yet is
        written when the dealer's epoll set says there is room)."""
        if hop_trace.log is not None:
            hop_trace.log("S")
        self._dealer.send(m.encode(message))

    def send_heartbeat(self) -> None:
        if self._dealer.ready:
            self.send(m.Heartbeat())

    def flush(self) -> None:
        self._dealer.flush()

    def receive(self, now: float) -> list[m.Message]:
        messages: list[m.Message] = []
        for frames in self._dealer.receive(now):
            if hop_trace.log is not None:
                hop_trace.log("R")
            _decode(frames, messages)
        return messages

    def wait_input(self, timeout: float) -> bool:
        return bool(self._poll.poll(max(1, int(timeout * 1000))))

    def handshake_problems(self, now: float) -> list[str]:
        self._dealer.tick(now)
        problems: list[str] = []
        for event, value in self._dealer.take_events():
            problems.extend(self.diagnosis.on_event(event, value))
        problems.extend(self.diagnosis.on_tick(now))
        return problems

    def seconds_to_tick(self) -> float:
        return 3600.0 if self._dealer.ready else _NOT_READY_TICK_SECONDS

    def close(self, linger_seconds: float) -> None:
        """What waits to be written goes, within `linger_seconds` (as libzmq's linger), and the connection ends in
        order: closed at once with a message of the scheduler's unread, the kernel would reset it and could drop
        the goodbye written last (zmtp_dealer.py, `close_in_order`)."""
        self._dealer.close_in_order(linger_seconds)


ClientLink = Union[ZmqClientLink, ZmtpClientLink]


def open_link(all_addresses: str, identity: bytes, curve_keys: PeerKeys | None, now: float) -> ClientLink:
    """The link the environment asks for (see the module's docstring); raises ValueError for unusable keys."""
    if zmtp_wanted(all_addresses, curve_keys):
        logger.debug("Client: speaking ZMTP itself to the scheduler (no zmq I/O thread on that link)")
        return ZmtpClientLink(all_addresses, identity, now)
    return ZmqClientLink(all_addresses, identity, curve_keys, now)
