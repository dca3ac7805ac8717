"""A standby scheduler's link to the schedulers ranked before it: the I/O shell around core/standby_core.py.

One DEALER per address of `--standby-of`, each sending the probe (a heartbeat from a peer nobody knows) and
reading the answer: `refused{unknownPeer}` from one that serves, `refused{standby}` from one standing by. A
probe is sent only on a live connection (IMMEDIATE) and never queued behind a dead one, so that a scheduler
coming back is not answered a backlog of probes. The server polls `sockets` and carries out the core's actions.
"""

from __future__ import annotations

import logging
import os

import zmq

from scaler.protocol import messages as m
from scaler.protocol.zmq_messages import send_message
from scaler.scheduler.core.standby_core import Probe, StandbyAction, StandbyCore
from scaler.utility.curve import ServerKeys, secure_probe
from scaler.utility.zmq_util import has_input, receive_frames

logger = logging.getLogger(__name__)

_PROBES_KEPT = 2  # at most this many probes wait on one connection


class StandbyLink:
    def __init__(
        self, context: zmq.Context, core: StandbyCore, heartbeat_interval_seconds: float, keys: ServerKeys | None,
    ) -> None:
        self.core = core
        self._by_socket: dict[zmq.Socket, str] = {}
        identity = f"standby|{os.urandom(4).hex()}".encode()
        for address in core.ranked_before:
            socket = context.socket(zmq.DEALER)
            socket.setsockopt(zmq.IDENTITY, identity)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.IMMEDIATE, 1)
            socket.setsockopt(zmq.SNDHWM, _PROBES_KEPT)
            socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            # A connection whose far end vanished (its host cut off) is dropped and dialled again, so that the
            # first probe after the partition heals reaches the scheduler there.
            socket.setsockopt(zmq.HEARTBEAT_IVL, max(1, int(heartbeat_interval_seconds * 1000)))
            socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, int(heartbeat_interval_seconds * 3000)))
            if keys is not None:  # a CURVE cluster's schedulers share one key pair: probe with it
                secure_probe(socket, keys)
            socket.connect(address)
            self._by_socket[socket] = address

    @property
    def sockets(self) -> list[zmq.Socket]:
        return list(self._by_socket)

    def on_readable(self, socket: zmq.Socket, now: float) -> list[StandbyAction]:
        address = self._by_socket[socket]
        out: list[StandbyAction] = []
        while has_input(socket):
            try:
                message = m.decode(receive_frames(socket))
            except m.ProtocolDecodeError:
                continue
            if isinstance(message, m.Refused):
                out.extend(self.core.on_answer(address, message.standby, now))
        return out

    def on_tick(self, now: float) -> list[StandbyAction]:
        actions = self.core.on_tick(now)
        if any(isinstance(action, Probe) for action in actions):
            for socket in self._by_socket:
                try:
                    send_message(socket, m.Heartbeat(), zmq.NOBLOCK)
                except zmq.Again:
                    pass  # no live connection: its silence is the answer
        return [action for action in actions if not isinstance(action, Probe)]

    def close(self) -> None:
        for socket in self._by_socket:
            socket.close(linger=0)
        self._by_socket.clear()
