"""The worker agent's end of its link to the scheduler: ZMTP spoken by its own thread, or libzmq's DEALER.

Both take and give a message as its frames; the agent's loop (agent.py) does not know which it has. By default
the agent speaks ZMTP 3.1 itself to tcp:// and ipc:// addresses (scaler/utility/zmtp_dealer.py, issue 24): each
message then costs no wake-up of a zmq I/O thread at this end. CURVE keys and other kinds of address need
libzmq, and `SCALER_WORKER_TRANSPORT=zmq` asks for it. The scheduler never knows the difference: the wire is
ZMTP either way.

What differs for the agent: with libzmq a send that must not be dropped and finds no usable connection (a
handshake that keeps failing, such as a refused CURVE key, leaves the DEALER without a pipe) is held and tried
again at each flush, and a flush fails once the oldest held message has waited the death timeout; the agent's
loop goes on meanwhile, so its ticks read the handshake watch and name the refusal. The ZMTP link queues every
message (as libzmq's pipe does while reconnecting), and the core's death timeout ends a worker that never hears
its scheduler. The handshake diagnosis is fed the events a zmq monitor would give (connected, handshake succeeded
or failed, disconnected); without CURVE the only failures are a peer that is not a ZMTP ROUTER and a secured
scheduler (a mechanism mismatch), both told as today.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Iterator, Protocol, Union

import zmq

from scaler.protocol.scheduler_session import LAST_HELLO_RETRY_SECONDS
from scaler.utility import hop_trace
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.handshake_failures import HandshakeDiagnosis, HandshakeWatch
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.zmq_util import Frame, SendsInOrder, configure_socket, has_input, receive_frames, send_frames
from scaler.utility.zmtp_dealer import ZmtpDealer, speaks
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

TRANSPORT_ENV = "SCALER_WORKER_TRANSPORT"
# How long a leaving agent waits for the scheduler to read its goodbye and close the connection in turn, at most.
_GOODBYE_SECONDS = 1.0


class LinkStuck(Exception):
    """A message that must not be dropped found no usable connection within the death timeout (raised by flush)."""


class SchedulerLink(Protocol):
    @property
    def pollable(self) -> Union[zmq.Socket, int]:
        """What the agent's poller watches: readable means `receive` has work."""

    @property
    def problem(self) -> str:
        """Why the connection does not work, if the handshakes say ("" when they do not)."""

    def receive(self, now: float) -> Iterator[list[Frame]]: ...
    def send(self, frames: list[Frame], may_drop: bool) -> None: ...
    def flush(self) -> None:
        """Write what waits; raises LinkStuck if a message that must not be dropped waited the death timeout."""
    def tick(self, now: float) -> list[str]: ...
    def reconnect(self, address: str, now: float) -> None: ...
    def close(self, goodbye: list[Frame]) -> None: ...


def open_scheduler_link(config: WorkerConfig, identity: bytes, address: str, now: float) -> SchedulerLink:
    """Connect to `address`; raises ValueError for unusable CURVE keys."""
    curve_keys = PeerKeys.resolve(config.curve_server_key, config.curve_secret_key)
    wanted = os.environ.get(TRANSPORT_ENV, "zmtp")
    if wanted == "zmtp" and curve_keys is None and all(map(speaks, parse_scheduler_addresses(config.address))):
        logger.info("Worker: speaking ZMTP itself to the scheduler (no zmq I/O thread on that link)")
        return ZmtpSchedulerLink(config, identity, address, now)
    if wanted not in ("zmq", "zmtp"):
        logger.warning(f"Worker: {TRANSPORT_ENV}={wanted!r} is neither zmq nor zmtp; using zmq")
    return ZmqSchedulerLink(config, identity, address, now, curve_keys)


def _no_usable_connection(config: WorkerConfig, problem: str) -> str:
    return (
        f"no usable connection to the scheduler at {config.address} for {config.death_timeout_seconds:g}s "
        "(--death-timeout-seconds), exiting" + (f": {problem}" if problem else "")
    )


class ZmqSchedulerLink:
    def __init__(
        self, config: WorkerConfig, identity: bytes, address: str, now: float, curve_keys: PeerKeys | None
    ) -> None:
        self._config = config
        self._context = zmq.Context(io_threads=config.io_threads)
        socket = self.pollable = self._context.socket(zmq.DEALER)
        configure_socket(socket, identity)
        # With a handshake that keeps failing (a CURVE mismatch) there may never be a usable connection.
        self._sends = SendsInOrder(socket)
        # After a lost scheduler, reconnect attempts back off as the hellos do (protocol/scheduler_session.py).
        socket.setsockopt(zmq.RECONNECT_IVL_MAX, int(LAST_HELLO_RETRY_SECONDS * 1000))
        self._watch: HandshakeWatch | None = None
        try:
            if curve_keys is not None:
                secure_peer(socket, curve_keys)
            # Made before the connect, so that no event is missed; it tells a refused key within a tick.
            self._watch = HandshakeWatch(socket, config.address, now, role="worker", secured=curve_keys is not None)
        except BaseException:
            self.close([])
            raise
        self._connected_to = address
        socket.connect(address)

    @property
    def problem(self) -> str:
        return self._watch.problem if self._watch is not None else ""

    def receive(self, now: float) -> Iterator[list[Frame]]:
        socket = self.pollable
        while has_input(socket):
            yield receive_frames(socket)

    def send(self, frames: list[Frame], may_drop: bool) -> None:
        # Never blocks: with no usable connection zmq would wait for one, and the loop would read neither the
        # handshake watch nor its processors meanwhile.
        self._sends.send(frames, may_drop)

    def flush(self) -> None:
        # zmq's I/O thread writes what was sent; what was kept is tried again.
        sends = self._sends
        sends.flush()
        if sends and time.monotonic() - sends.waiting_since >= self._config.death_timeout_seconds:
            raise LinkStuck(_no_usable_connection(self._config, self.problem))

    def tick(self, now: float) -> list[str]:
        return self._watch.poll(now) if self._watch is not None else []

    def reconnect(self, address: str, now: float) -> None:
        self.pollable.disconnect(self._connected_to)
        self._connected_to = address
        self.pollable.connect(address)

    def close(self, goodbye: list[Frame]) -> None:
        if goodbye:
            try:
                send_frames(self.pollable, goodbye, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        if self._watch is not None:
            self._watch.close()
        self.pollable.close(linger=100)
        self._context.term()


class ZmtpSchedulerLink:
    def __init__(self, config: WorkerConfig, identity: bytes, address: str, now: float) -> None:
        self._dealer = ZmtpDealer(identity, last_retry_seconds=LAST_HELLO_RETRY_SECONDS)
        self.pollable = self._dealer.fileno()
        self._diagnosis = HandshakeDiagnosis(config.address, "the scheduler", "worker", False, now)
        self._dealer.connect(address, now)

    @property
    def problem(self) -> str:
        return self._diagnosis.problem

    def receive(self, now: float) -> Iterator[list[Frame]]:
        for frames in self._dealer.receive(now):
            if hop_trace.log is not None:
                hop_trace.log("R")
            yield frames

    def send(self, frames: list[Frame], may_drop: bool) -> None:
        # Queued while no connection is ready, whether it may be dropped or not: a reconnection takes a tenth of a
        # second, and the scheduler's session rules expect what libzmq's pipe would have kept.
        if hop_trace.log is not None:
            hop_trace.log("S")
        self._dealer.send(frames)

    def flush(self) -> None:
        self._dealer.flush()

    def tick(self, now: float) -> list[str]:
        self._dealer.tick(now)
        problems: list[str] = []
        for event, value in self._dealer.take_events():
            problems.extend(self._diagnosis.on_event(event, value))
        problems.extend(self._diagnosis.on_tick(now))
        return problems

    def reconnect(self, address: str, now: float) -> None:
        self._dealer.connect(address, now)

    def close(self, goodbye: list[Frame]) -> None:
        if goodbye and self._dealer.ready:
            self._dealer.send(goodbye)
            # The goodbye written, the connection ends in order: the scheduler reads it, then our end's close, and
            # closes its own. Closed at once, with a message of the scheduler's unread (a store directory sent as
            # the job's store left), the kernel resets the connection and may drop the goodbye with it.
            if not self._dealer.close_in_order(_GOODBYE_SECONDS):
                logger.debug("Worker: the connection to the scheduler did not end in order (no answer in time)")
            return
        self._dealer.close()
