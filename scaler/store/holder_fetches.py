"""This store as a reader of other stores: one DEALER per holder it fetches from, and the fetches in flight.

A store that lacks an object a reader asks for, and is told which store holds it, gets it from there
as any remote reader does (data protocol `get`, in frames small enough to copy out without faulting in
a payload-sized buffer). The server turns what comes back into the core's on_fetched/on_fetch_failed.

A holder this store cannot connect to within the probe time of its first fetch (another host whose data
port is firewalled, or on a network this host has no route to) is reached through the scheduler instead
(relay, PROTOCOL.md §19): its pending fetches and every later one go there, and its answers come back
over the scheduler link. Said in the log once per holder.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Union

import zmq

from scaler.protocol import data_messages as d
from scaler.protocol import messages as m
from scaler.protocol.messages import Buffer
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS

logger = logging.getLogger(__name__)

# How long a fetch may go unanswered before its record is dropped (its readers are answered by then).
FETCH_RECORD_SECONDS = 3600.0
_MAX_MESSAGES_PER_WAKE = 64


@dataclasses.dataclass(frozen=True)
class Fetched:
    object_id: bytes
    size: int
    payload: list[Buffer]


@dataclasses.dataclass(frozen=True)
class FetchFailed:
    object_id: bytes
    reason: str


@dataclasses.dataclass(frozen=True)
class Garbled:
    """A holder sent something that is not a data message."""

    holder: str
    what: str


FetchEvent = Union[Fetched, FetchFailed, Garbled]


class HolderFetches:
    def __init__(
        self, context: zmq.Context, poller: zmq.Poller, relay: Callable[[m.Relay], object] | None = None,
        probe_seconds: float = DEFAULT_PROBE_SECONDS,
    ) -> None:
        self._context = context
        self._poller = poller
        self._dealers: dict[str, zmq.Socket] = {}  # holder's data address -> our DEALER to it
        self._holders_by_socket: dict[zmq.Socket, str] = {}
        # (holder, request id) -> object, started, how long the holder may wait for it
        self._fetches: dict[tuple[str, int], tuple[bytes, float, int]] = {}
        self._next_request = 1
        self._relay = relay  # sends a relay to the scheduler; None: no scheduler link, no relaying
        self._probe_seconds = probe_seconds
        self._monitors: dict[zmq.Socket, str] = {}  # holder's connection events, until it is connected
        self._probe_deadlines: dict[str, float] = {}  # holder -> when, still unconnected, it counts as out of reach
        self._relayed: set[str] = set()

    def owns(self, socket: zmq.Socket) -> bool:
        return socket in self._holders_by_socket or socket in self._monitors

    def request(self, holder: str, object_id: bytes, wait_ms: int, now: float) -> str | None:
        """Ask `holder` for the object; returns why it cannot be asked (None: asked)."""
        request_id = self._next_request
        if holder in self._relayed:
            assert self._relay is not None
            self._next_request += 1
            self._fetches[(holder, request_id)] = (object_id, now, wait_ms)
            self._relay(m.Relay(frames=d.encode(_get(request_id, object_id, wait_ms)), store=holder,
                                request_id=request_id))
            return None
        dealer = self._dealers.get(holder)
        if dealer is None:
            dealer = self._context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.SNDHWM, 0)
            dealer.setsockopt(zmq.RCVHWM, 0)
            dealer.setsockopt(zmq.LINGER, 0)
            monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) if self._relay else None
            try:
                dealer.connect(holder)
            except zmq.ZMQError as error:
                if monitor is not None:
                    dealer.disable_monitor()
                    monitor.close(linger=0)
                dealer.close()
                return f"{holder}: {error}"
            self._dealers[holder] = dealer
            self._holders_by_socket[dealer] = holder
            self._poller.register(dealer, zmq.POLLIN)
            if monitor is not None:
                self._monitors[monitor] = holder
                self._probe_deadlines[holder] = now + self._probe_seconds
                self._poller.register(monitor, zmq.POLLIN)
        self._next_request += 1
        self._fetches[(holder, request_id)] = (object_id, now, wait_ms)
        dealer.send_multipart(d.encode(_get(request_id, object_id, wait_ms)))
        return None

    def check_probes(self, now: float) -> None:
        """Holders still unconnected at the end of their probe time: from now on, through the scheduler."""
        for holder, deadline in list(self._probe_deadlines.items()):
            if now < deadline:
                continue
            assert self._relay is not None
            logger.warning(
                f"Store: no connection to the store's data address {holder} within {self._probe_seconds:g}s; "
                "relaying its data through the scheduler"
            )
            self._stop_probing(holder)
            dealer = self._dealers.pop(holder)
            del self._holders_by_socket[dealer]
            self._poller.unregister(dealer)
            dealer.close(linger=0)  # the fetches it queued never leave: they go by the scheduler instead
            self._relayed.add(holder)
            for (fetch_holder, request_id), (object_id, started, wait_ms) in self._fetches.items():
                if fetch_holder == holder:
                    left_ms = max(0, wait_ms - int((now - started) * 1000))
                    self._relay(m.Relay(frames=d.encode(_get(request_id, object_id, left_ms)), store=holder,
                                        request_id=request_id))

    def _stop_probing(self, holder: str) -> None:
        self._probe_deadlines.pop(holder, None)
        for monitor, watched in list(self._monitors.items()):
            if watched == holder:
                del self._monitors[monitor]
                self._poller.unregister(monitor)
                self._dealers[holder].disable_monitor()
                monitor.close(linger=0)

    def on_relayed_answer(self, holder: str, request_id: int, frames: list[Buffer], error: str) -> list[FetchEvent]:
        """What a holder answered through the scheduler, or why the scheduler could not pass the fetch on."""
        if not error:
            return self._answer(holder, frames)
        fetch = self._fetches.pop((holder, request_id), None)
        return [FetchFailed(fetch[0], f"{holder}: {error}")] if fetch is not None else []

    def drain(self, socket: zmq.Socket) -> list[FetchEvent]:
        """The answers that arrived from one holder (or, on its monitor socket, that it is connected)."""
        watched = self._monitors.get(socket)
        if watched is not None:
            self._stop_probing(watched)  # connected: it stays direct
            return []
        holder = self._holders_by_socket[socket]
        events: list[FetchEvent] = []
        for _ in range(_MAX_MESSAGES_PER_WAKE):
            try:
                frames: list[Buffer] = [part.buffer for part in socket.recv_multipart(zmq.NOBLOCK, copy=False)]
            except zmq.Again:
                break
            events += self._answer(holder, frames)
        return events

    def _answer(self, holder: str, frames: list[Buffer]) -> list[FetchEvent]:
        try:
            message = d.decode(frames)
        except d.ProtocolDecodeError as error:
            return [Garbled(holder, f"an undecodable answer to a fetch ({error})")]
        request_id = getattr(message, "request_id", None)
        fetch = self._fetches.pop((holder, request_id), None) if isinstance(request_id, int) else None
        if fetch is None:
            return []  # the answer to a fetch given up on
        object_id = fetch[0]
        if isinstance(message, d.ObjectData) and message.object_id == object_id:
            return [Fetched(object_id, message.size, message.payload)]
        reason = getattr(message, "reason", "") or f"it answered {type(message).__name__}"
        return [FetchFailed(object_id, f"{holder}: {reason}")]

    def forget_stale(self, now: float) -> None:
        for key, (_, started, _) in list(self._fetches.items()):
            if now - started > FETCH_RECORD_SECONDS:
                del self._fetches[key]

    def close(self) -> None:
        for holder in list(self._probe_deadlines):
            self._stop_probing(holder)
        for dealer in self._dealers.values():
            dealer.close(linger=0)
        self._dealers.clear()
        self._holders_by_socket.clear()


def _get(request_id: int, object_id: bytes, wait_ms: int) -> d.Get:
    return d.Get(request_id, object_id, local=False, wait_ms=wait_ms, max_frame_bytes=d.COPIED_FRAME_BYTES)
