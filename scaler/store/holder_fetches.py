"""This store as a reader of other stores: one DEALER per holder it fetches from, and the fetches in flight.

A store that lacks an object a reader asks for, and is told which store holds it, gets it from there
as any remote reader does (data protocol `get`, in frames small enough to copy out without faulting in
a payload-sized buffer). The server turns what comes back into the core's on_fetched/on_fetch_failed.
"""

from __future__ import annotations

import dataclasses
from typing import Union

import zmq

from scaler.protocol import data_messages as d
from scaler.protocol.messages import Buffer

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
    def __init__(self, context: zmq.Context, poller: zmq.Poller) -> None:
        self._context = context
        self._poller = poller
        self._dealers: dict[str, zmq.Socket] = {}  # holder's data address -> our DEALER to it
        self._holders_by_socket: dict[zmq.Socket, str] = {}
        self._fetches: dict[tuple[str, int], tuple[bytes, float]] = {}  # (holder, request id) -> object, started
        self._next_request = 1

    def owns(self, socket: zmq.Socket) -> bool:
        return socket in self._holders_by_socket

    def request(self, holder: str, object_id: bytes, wait_ms: int, now: float) -> str | None:
        """Ask `holder` for the object; returns why it cannot be asked (None: asked)."""
        dealer = self._dealers.get(holder)
        if dealer is None:
            dealer = self._context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.SNDHWM, 0)
            dealer.setsockopt(zmq.RCVHWM, 0)
            dealer.setsockopt(zmq.LINGER, 0)
            try:
                dealer.connect(holder)
            except zmq.ZMQError as error:
                dealer.close()
                return f"{holder}: {error}"
            self._dealers[holder] = dealer
            self._holders_by_socket[dealer] = holder
            self._poller.register(dealer, zmq.POLLIN)
        request_id = self._next_request
        self._next_request += 1
        self._fetches[(holder, request_id)] = (object_id, now)
        get = d.Get(request_id, object_id, local=False, wait_ms=wait_ms, max_frame_bytes=d.COPIED_FRAME_BYTES)
        dealer.send_multipart(d.encode(get))
        return None

    def drain(self, dealer: zmq.Socket) -> list[FetchEvent]:
        """The answers that arrived from one holder."""
        holder = self._holders_by_socket[dealer]
        events: list[FetchEvent] = []
        for _ in range(_MAX_MESSAGES_PER_WAKE):
            try:
                frames = [part.buffer for part in dealer.recv_multipart(zmq.NOBLOCK, copy=False)]
            except zmq.Again:
                break
            try:
                message = d.decode(frames)
            except d.ProtocolDecodeError as error:
                events.append(Garbled(holder, f"an undecodable answer to a fetch ({error})"))
                continue
            request_id = getattr(message, "request_id", None)
            fetch = self._fetches.pop((holder, request_id), None) if isinstance(request_id, int) else None
            if fetch is None:
                continue  # the answer to a fetch given up on
            object_id, _ = fetch
            if isinstance(message, d.ObjectData) and message.object_id == object_id:
                events.append(Fetched(object_id, message.size, message.payload))
            else:
                reason = getattr(message, "reason", "") or f"it answered {type(message).__name__}"
                events.append(FetchFailed(object_id, f"{holder}: {reason}"))
        return events

    def forget_stale(self, now: float) -> None:
        for key, (_, started) in list(self._fetches.items()):
            if now - started > FETCH_RECORD_SECONDS:
                del self._fetches[key]

    def close(self) -> None:
        for dealer in self._dealers.values():
            dealer.close(linger=0)
        self._dealers.clear()
        self._holders_by_socket.clear()
