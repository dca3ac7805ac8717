"""The store's link to a real scheduler: a DEALER speaking the control protocol as role `store` (PROTOCOL.md §17).

Hello with the store's data and ipc addresses, host key and capacity; heartbeats with what it holds;
objectsHeld (everything once welcomed, then the copies it fetched, batched per tick) and objectsLost (at
once) out; deleteObjects in. A store that the scheduler refuses or sends away stops, as a worker does. One
that a scheduler does not know any more (it restarted: `refused` with unknownPeer) keeps its objects and
says hello again, with a backoff while no welcome comes; welcomed, it announces everything it holds
(objectsHeld), as at its first welcome, and the new scheduler adds it as their holder when their owners
name them again (PROTOCOL.md §21). One that hears nothing from the scheduler for the death timeout stops
(the Cluster that started it is then without a scheduler as well).
"""

from __future__ import annotations

import logging
import os
import socket as socket_module

import psutil
import zmq

from scaler.protocol import messages as m
from scaler.protocol.address_rotation import AddressRotation, silence_seconds
from scaler.protocol.scheduler_session import LAST_HELLO_RETRY_SECONDS, SchedulerSession
from scaler.protocol.versions import UNNAMED_RELEASE, refused_by_scheduler
from scaler.protocol.zmq_messages import send_message
from scaler.store.scheduler_link import (
    DeleteOrder,
    LinkEvent,
    Registered,
    RelayedAnswer,
    RelayedRequest,
    SchedulerLink,
    StopStore,
    StoreIdentity,
)
from scaler.store.store_records import StoreStatus
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.handshake_failures import HandshakeWatch
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.zmq_util import configure_socket, receive_frames

logger = logging.getLogger(__name__)

# How long a closing link may take to hand its goodbye to the network.
_GOODBYE_LINGER_MS = 200
_MAX_MESSAGES_PER_WAKE = 64
# Ids per objectsHeld message: a store of millions of objects announces them in bounded control frames.
_HELD_PER_MESSAGE = 50_000


class ControlLink(SchedulerLink):
    def __init__(
        self, scheduler_address: str, name: str, keys: PeerKeys | None = None,
        heartbeat_interval_seconds: float = 2.0, death_timeout_seconds: float = 300.0,
    ) -> None:
        self._scheduler_address = scheduler_address
        self._name = name
        self._keys = keys
        self._own_interval = heartbeat_interval_seconds
        self._interval = heartbeat_interval_seconds
        self._death_timeout = death_timeout_seconds
        self._socket: zmq.Socket | None = None
        self._handshakes: HandshakeWatch | None = None  # tells a refused key at once, not at the death timeout
        self._welcomed = False
        self._last_heard = 0.0
        self._next_heartbeat = 0.0
        self._process = psutil.Process()
        self._held: list[tuple[bytes, int]] = []  # to announce at the next tick
        # Lost while no scheduler knew us: told once welcomed, since one that kept us (we came back to it) still
        # takes us for their holder; one that does not know them ignores them.
        self._lost_meanwhile: list[bytes] = []
        self._hello: m.Hello | None = None
        self._session = SchedulerSession()  # whether the scheduler knows us, and when to say hello again
        # Which of several schedulers (a standby's) we talk to: the next one when it is silent or stands by.
        self._addresses = AddressRotation(parse_scheduler_addresses(scheduler_address), silence_seconds(
            heartbeat_interval_seconds, death_timeout_seconds))

    def start(self, context: zmq.Context, identity: StoreIdentity, now: float) -> list[zmq.Socket]:
        socket = self._socket = context.socket(zmq.DEALER)
        configure_socket(socket, f"S|{self._name}|{os.urandom(4).hex()}".encode())
        socket.setsockopt(zmq.RECONNECT_IVL_MAX, int(LAST_HELLO_RETRY_SECONDS * 1000))
        if self._keys is not None:
            secure_peer(socket, self._keys)
        self._handshakes = HandshakeWatch(
            socket, self._scheduler_address, now, role="store", secured=self._keys is not None
        )
        socket.connect(self._addresses.current)
        self._hello = m.Hello(
            role=m.Role.STORE, name=self._name, hostname=socket_module.gethostname(), pid=identity.pid,
            host_key=identity.host_key, data_address=identity.data_address, ipc_address=identity.ipc_address,
            capacity_bytes=identity.capacity_bytes,
        )
        send_message(socket, self._hello)
        self._last_heard = now
        self._next_heartbeat = now + self._interval
        self._process.cpu_percent()  # the first call only starts the measurement
        return [socket]

    def on_readable(self, socket: zmq.Socket, now: float) -> list[LinkEvent]:
        events: list[LinkEvent] = []
        for _ in range(_MAX_MESSAGES_PER_WAKE):
            try:
                frames = receive_frames(socket, zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                message = m.decode(frames)
            except m.ProtocolDecodeError as error:
                logger.warning(f"Store: dropped an undecodable message from the scheduler: {error}")
                continue
            if isinstance(message, m.Refused) and message.standby:
                self._addresses.refused(now)  # not a word from one that serves: the death timeout runs on
                continue
            self._last_heard = now
            events.extend(self._on_message(message, now))
        return events

    def _on_message(self, message: m.Message, now: float) -> list[LinkEvent]:
        if isinstance(message, m.DeleteObjects):
            return [DeleteOrder(tuple(message.object_ids))]
        if isinstance(message, m.Relay):
            if message.peer:
                return [RelayedRequest(message.peer, message.frames)]
            return [RelayedAnswer(message.store, message.request_id, message.frames, message.error)]
        if isinstance(message, m.Welcome):
            self._session.welcomed(None, "Store", message)
            self._addresses.welcomed()
            self._welcomed = True
            self._interval = message.heartbeat_interval_for(self._own_interval)
            self._next_heartbeat = min(self._next_heartbeat, now + self._interval)
            logger.info(
                f"Store: registered with the scheduler at {self._scheduler_address} "
                f"({message.release or UNNAMED_RELEASE}, protocol version {message.protocol_version})"
            )
            return [Registered()]
        elif isinstance(message, m.Refused):
            if message.unknown_peer and (self._welcomed or self._session.rejoining):
                # A scheduler that restarted: say hello again (unless we did: this answers what we sent before).
                if self._session.lost(now, "Store", self._scheduler_address, keeping="keeping every object"):
                    self._welcomed = False
                    self._held.clear()  # everything is announced again after the welcome
                    self._say_hello()
                return []
            reason = refused_by_scheduler("store", self._scheduler_address, message.reason)
            return [StopStore(reason, failed=not self._welcomed)]  # refused while rejoining too: nowhere to go
        elif isinstance(message, m.Disconnect):
            return [StopStore(f"the scheduler asked the store to leave: {message.reason}")]
        elif isinstance(message, m.ProtocolError):
            if self._session.still_registered(message.reason):  # back from a standby: leave, then join again
                self._send(m.Disconnect(reason="rejoining"))
                self._say_hello()
            else:
                logger.warning(f"Store: the scheduler reports a protocol error: {message.reason}")
        return []

    def on_tick(self, status: StoreStatus, now: float) -> list[LinkEvent]:
        if self._handshakes is not None:
            for problem in self._handshakes.poll(now):
                logger.error(f"Store: {problem}")
        moved_to = self._addresses.on_tick(now, self._last_heard)
        if moved_to is not None:
            self._move(moved_to, now)
        if now - self._last_heard > self._death_timeout:
            problem = self._handshakes.problem if self._handshakes is not None else ""
            return [StopStore(
                f"no word from the scheduler at {self._scheduler_address} for {self._death_timeout:g}s"
                + (f": {problem}" if problem else "")
            )]
        if self._session.rejoining:
            if self._session.hello_due(now):
                self._say_hello()
            return []  # a heartbeat would only be refused
        self._send_held()
        if now >= self._next_heartbeat and self._socket is not None:
            self._next_heartbeat = now + self._interval
            try:
                send_message(self._socket, m.Heartbeat(
                    cpu_percent=self._process.cpu_percent(), rss_bytes=self._process.memory_info().rss,
                    bytes_held=status.held_bytes, bytes_spilled=status.spilled_bytes,
                    bytes_pinned=status.pinned_bytes, object_count=status.object_count,
                ), zmq.NOBLOCK)
            except zmq.Again:
                pass  # no connection to queue it on (yet, or a handshake that fails): the death timeout decides
        return []

    def _move(self, address: str, now: float) -> None:
        """To the next scheduler address (silent, or a standby): hello there; once welcomed, announce every
        object held, as after a restart (§21)."""
        logger.warning(f"Store: trying the scheduler at {address}")
        if self._socket is not None:
            addresses = self._addresses.addresses
            self._socket.disconnect(addresses[addresses.index(address) - 1])
            self._socket.connect(address)
        if self._welcomed or self._session.rejoining:
            self._session.lost(now, "Store", address, keeping="keeping every object", why="is the next to try")
            self._welcomed = False
            self._held.clear()
        self._say_hello()

    def _say_hello(self) -> None:
        if self._hello is not None:
            self._send(self._hello)

    def objects_held(self, objects: tuple[tuple[bytes, int], ...]) -> None:
        # Before the welcome the scheduler would refuse it; the welcome makes the server announce everything.
        if self._welcomed:
            self._held.extend(objects)

    def objects_lost(self, object_ids: tuple[bytes, ...]) -> None:
        logger.warning(f"Store: lost {len(object_ids)} objects; telling the scheduler")
        if not self._welcomed:
            self._lost_meanwhile.extend(object_ids)
            return
        # Copies announced as held before they were lost must reach the scheduler first.
        self._send_held()
        self._send(m.ObjectsLost(object_ids=list(object_ids)))

    def _send_held(self) -> None:
        held, self._held = self._held, []
        for start in range(0, len(held), _HELD_PER_MESSAGE):
            chunk = held[start: start + _HELD_PER_MESSAGE]
            self._send(m.ObjectsHeld(
                object_ids=[object_id for object_id, _ in chunk], sizes=[size for _, size in chunk]
            ))
        if self._lost_meanwhile:
            lost, self._lost_meanwhile = self._lost_meanwhile, []
            for start in range(0, len(lost), _HELD_PER_MESSAGE):
                self._send(m.ObjectsLost(object_ids=lost[start: start + _HELD_PER_MESSAGE]))

    def _send(self, message: m.Message) -> None:
        if self._socket is None:
            return
        try:
            send_message(self._socket, message, zmq.NOBLOCK)
        except zmq.Again:
            logger.warning(f"Store: no connection to the scheduler; dropped {type(message).__name__}")

    def send_relay(self, relay: m.Relay, track: bool = False) -> zmq.MessageTracker | None:
        socket = self._socket
        if socket is None:
            return None
        frames = m.encode(relay)
        try:
            if not track:
                socket.send_multipart(frames, zmq.NOBLOCK, copy=False)
                return None
            trackers = [socket.send(frame, zmq.SNDMORE | zmq.NOBLOCK, copy=False, track=True) for frame in frames[:-1]]
            trackers.append(socket.send(frames[-1], zmq.NOBLOCK, copy=False, track=True))
        except zmq.Again:
            # No connection to the scheduler to queue it on: the requester's own timeout ends its wait.
            logger.warning("Store: could not pass a relayed message to the scheduler (no connection); dropped")
            return None
        return zmq.MessageTracker(*[tracker for tracker in trackers if tracker])

    def close(self) -> None:
        handshakes, self._handshakes = self._handshakes, None
        if handshakes is not None:
            handshakes.close()
        socket, self._socket = self._socket, None
        if socket is None:
            return
        try:
            if self._welcomed:
                send_message(socket, m.Disconnect(reason="store stopping"), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        socket.close(linger=_GOODBYE_LINGER_MS)

    @property
    def welcomed(self) -> bool:
        return self._welcomed
