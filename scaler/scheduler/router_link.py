"""The scheduler's end of its links to every peer: ZMTP spoken by its own thread, or libzmq's ROUTER.

Both take a message as the peer's identity followed by its frames, and give one the same way; the loop in
server.py does not know which it has. By default the scheduler speaks ZMTP 3.1 itself on tcp:// and ipc://
addresses (scaler/utility/zmtp_router.py, issue 24): each message then costs no wake-up of a zmq I/O thread at
this end. CURVE keys and inproc:// addresses need libzmq, and `SCALER_SCHEDULER_TRANSPORT=zmq` asks for it. The
peers never know the difference: the wire is ZMTP either way. Two differences a peer that breaks the rules may
see: a connection that does not speak ZMTP 3 is closed at its greeting and counted in the bad-frame log per host
(libzmq reads such bytes as ZMTP 1.0 messages, which the scheduler then drops as undecodable,
tests/integration/test_bad_frame_logging.py), and one that fails the handshake is told why with ZMTP's ERROR
before the close.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Iterator, Protocol, Union

import zmq

from scaler.scheduler.config import SchedulerConfig
from scaler.utility import hop_trace
from scaler.utility.curve import ServerKeys, secure_server
from scaler.utility.zmq_util import Frame, configure_socket, has_input, receive_frames, send_frames
from scaler.utility.zmtp_router import ZmtpRouter

logger = logging.getLogger(__name__)

TRANSPORT_ENV = "SCALER_SCHEDULER_TRANSPORT"


class LinkStartError(Exception):
    """The link could not listen; the message says why."""


class RouterLink(Protocol):
    @property
    def pollable(self) -> Union[zmq.Socket, int]:
        """What the scheduler's poller watches: readable means `receive` has work."""

    def watch(self, fd: int) -> None:
        """Let `fd` becoming readable end a `wait` too (the loop's stop pipe)."""

    def wait(self, timeout_seconds: float) -> None:
        """Until `receive` has work, a watched descriptor is readable, or the timeout passes (rounded up to the ms)."""

    def receive(self, now: float, limit: int) -> Iterator[list[Frame]]: ...
    def send(self, frames: list[Frame]) -> None: ...
    def flush(self) -> None: ...
    def tick(self, now: float) -> None: ...
    def close(self) -> None: ...

    def take_refused(self) -> list[tuple[bytes, str]]:
        """Connections refused before their handshake since the last call: where from, and what they sent."""

    def take_lost(self, now: float) -> list[bytes]:
        """Peers whose connection they ended (their process died, or closed it) without coming back within a
        second since (zmtp_router.py): each identity once."""


def open_router_link(config: SchedulerConfig, context: zmq.Context, curve_keys: ServerKeys | None) -> RouterLink:
    """Listen on the scheduler's address; raises LinkStartError if it cannot."""
    # ZeroMQ pings each connection, so that the TCP connection of a peer whose machine vanished is
    # closed instead of kept open with its queued messages. Only after the longest peer timeout: by
    # then the core has dropped that peer, so closing a connection can never lose what it still owes.
    # A ping every quarter of that is enough for it, and each one wakes zmq's I/O thread per connection.
    longest_timeout = max(config.worker_timeout_seconds, config.client_timeout_seconds)
    ping_interval = max(config.heartbeat_interval_seconds, longest_timeout / 4)
    wanted = os.environ.get(TRANSPORT_ENV, "zmtp")
    if wanted == "zmtp" and curve_keys is None and not config.address.startswith("inproc://"):
        try:
            router = ZmtpRouter(config.address, config.max_message_size_bytes, ping_interval, longest_timeout)
        except OSError as error:
            raise LinkStartError(f"cannot listen on {config.address}: {error}") from None
        logger.info("Scheduler: speaking ZMTP itself (no zmq I/O thread on its links)")
        return ZmtpRouterLink(router)
    if wanted not in ("zmq", "zmtp"):
        logger.warning(f"Scheduler: {TRANSPORT_ENV}={wanted!r} is neither zmq nor zmtp; using zmq")
    return ZmqRouterLink(config, context, curve_keys, ping_interval, longest_timeout)


class ZmqRouterLink:
    def __init__(
        self, config: SchedulerConfig, context: zmq.Context, curve_keys: ServerKeys | None, ping_interval: float,
        ping_timeout: float,
    ) -> None:
        socket = self.pollable = context.socket(zmq.ROUTER)
        configure_socket(socket)
        socket.setsockopt(zmq.MAXMSGSIZE, config.max_message_size_bytes)
        socket.setsockopt(zmq.HEARTBEAT_IVL, max(1, int(ping_interval * 1000)))
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, int(ping_timeout * 1000)))
        self._authenticator = None
        self._poller = zmq.Poller()
        self._poller.register(socket, zmq.POLLIN)
        try:
            if curve_keys is not None:
                try:
                    self._authenticator = secure_server(context, socket, curve_keys)
                except ValueError as error:
                    raise LinkStartError(f"cannot start: {error}") from None
                logger.info(f"Scheduler: CURVE on, accepting the keys in {curve_keys.authorized_keys_dir}")
            try:
                socket.bind(config.address)
            except zmq.ZMQError as error:
                raise LinkStartError(f"cannot listen on {config.address}: {error}") from None
        except LinkStartError:
            self.close()
            raise

    def watch(self, fd: int) -> None:
        self._poller.register(fd, zmq.POLLIN)

    def wait(self, timeout_seconds: float) -> None:
        self._poller.poll(max(0, math.ceil(timeout_seconds * 1000)))

    def receive(self, now: float, limit: int) -> Iterator[list[Frame]]:
        # Asking the socket is cheaper than the poll's result and than the exception of a receive that finds
        # nothing (zmq.Again), which the last receive of each wake would raise.
        socket = self.pollable
        for _ in range(limit):
            if not has_input(socket):
                return
            yield receive_frames(socket)

    def send(self, frames: list[Frame]) -> None:
        send_frames(self.pollable, frames)

    def flush(self) -> None:
        pass  # zmq's I/O thread writes

    def tick(self, now: float) -> None:
        pass  # zmq's I/O thread pings

    def take_refused(self) -> list[tuple[bytes, str]]:
        return []  # libzmq refuses silently; what it reads as ZMTP 1.0 messages comes in as undecodable ones

    def take_lost(self, now: float) -> list[bytes]:
        return []  # libzmq's ROUTER does not say: a peer that vanished is known by its silence alone

    def close(self) -> None:
        self.pollable.close(linger=0)
        if self._authenticator is not None:
            self._authenticator.stop()


class ZmtpRouterLink:
    def __init__(self, router: ZmtpRouter) -> None:
        self._router = router
        self.pollable = router.fileno()

    def watch(self, fd: int) -> None:
        self._router.watch(fd)

    def wait(self, timeout_seconds: float) -> None:
        # One epoll_wait for the sockets and the stop pipe alike (zmq_poll would make two poll calls of each wake,
        # the first with no timeout, and then the router would ask epoll once more).
        self._router.wait(max(0.0, timeout_seconds))

    def receive(self, now: float, limit: int) -> Iterator[list[Frame]]:
        for frames in self._router.receive(now, limit):
            if hop_trace.log is not None:
                hop_trace.log("R")
            yield frames

    def send(self, frames: list[Frame]) -> None:
        if hop_trace.log is not None:
            hop_trace.log("S")
        self._router.send(frames)  # to no connection: dropped, as libzmq's ROUTER does without ROUTER_MANDATORY

    def flush(self) -> None:
        self._router.flush()

    def tick(self, now: float) -> None:
        self._router.tick(now)

    def take_refused(self) -> list[tuple[bytes, str]]:
        return [(host.encode(), f"a connection that did not speak ZMTP 3 ({reason})")
                for host, reason in self._router.take_refused()]

    def take_lost(self, now: float) -> list[bytes]:
        return self._router.take_lost(now)

    def close(self) -> None:
        self._router.close()
