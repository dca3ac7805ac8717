"""The scheduler's end of the monitor feed: a PUB socket that publishes a MonitorSnapshot about once a second.

The snapshot types and their wire encoding live in `scaler/protocol/monitor_messages.py`, which is also
what `scaler_top` and `scaler_ui` decode the feed with. PROTOCOL.md §12 documents the feed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable

import zmq

from scaler.protocol.monitor_messages import MonitorSnapshot, encode_snapshot
from scaler.utility.ipc_sockets import file_identity, ipc_path, is_listening, remove_if_same

logger = logging.getLogger(__name__)

# Subscribers only want the newest snapshot: a slow one should lose old snapshots, not cost memory here.
_SEND_HIGH_WATER_MARK = 4


class MonitorPublisher:
    """A PUB socket bound at the monitor address; about once a second, while `watched`, the scheduler publishes.

It is an XPUB, which hears subscriptions come and go: with nobody watching (most of a scheduler's life),
no snapshot is built at all, which with hundreds of workers is a few milliseconds of the loop every second.

    It never raises into the loop: a monitor address that cannot be bound is logged and the feed is
    off, and a snapshot that cannot be encoded is logged (once) and skipped. It never takes an ipc
    address another process listens on (libzmq would unlink that process's socket file to bind), and it
    removes only the socket file it bound itself.
    """

    def __init__(self, context: zmq.Context, address: str) -> None:
        self._address = address
        self._sequence = 0
        self._reported_failure = False
        self._ipc_path = ipc_path(address)
        self._socket: zmq.Socket | None = None
        self._file_identity: tuple[int, int] | None = None
        if self._ipc_path is not None and os.path.exists(self._ipc_path) and is_listening(self._ipc_path):
            logger.error(
                f"Scheduler: monitor feed is off, another process (a running scheduler?) serves {address}; "
                "choose another address with --monitor-address"
            )
            return
        # Subscriptions, by topic (every subscriber takes everything: b""). With XPUB_VERBOSE the socket passes
        # every subscription, so that each newcomer is seen; an unsubscription only when a topic's last
        # subscriber goes.
        self._topics: set[bytes] = set()
        # Someone subscribed since the last snapshot sent: a view (a notebook's summary) that wants one now.
        self._newcomer = False
        socket = context.socket(zmq.XPUB)
        socket.setsockopt(zmq.XPUB_VERBOSE, 1)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDHWM, _SEND_HIGH_WATER_MARK)
        try:
            socket.bind(address)
        except zmq.ZMQError as error:
            socket.close(linger=0)
            logger.error(
                f"Scheduler: monitor feed is off, cannot bind {address}: {error}; "
                "choose another address with --monitor-address"
            )
            return
        self._socket = socket
        if self._ipc_path is not None:
            self._file_identity = file_identity(self._ipc_path)

    @property
    def address(self) -> str:
        return self._address

    @property
    def is_bound(self) -> bool:
        return self._socket is not None

    @property
    def watched(self) -> bool:
        """Whether anyone subscribes now, from the subscriptions and unsubscriptions received so far."""
        socket = self._socket
        if socket is None:
            return False
        while True:
            try:
                event = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return bool(self._topics)
            if event[:1] == b"\x01":
                self._topics.add(bytes(event[1:]))
                self._newcomer = True
            elif event[:1] == b"\x00":
                self._topics.discard(bytes(event[1:]))

    @property
    def newcomer_waiting(self) -> bool:
        """Whether someone subscribed since the last snapshot was sent: it should not wait out the second."""
        return self.watched and self._newcomer

    def publish_if_watched(self, make_snapshot: Callable[[], MonitorSnapshot]) -> None:
        """Build the snapshot and publish it, if anyone subscribes."""
        if self.watched:
            self.publish(make_snapshot())

    def publish(self, snapshot: MonitorSnapshot) -> None:
        """Send the snapshot, numbered and stamped here (its own `sequence` and `published_at` are not read)."""
        if self._socket is None:
            return
        try:
            frame = encode_snapshot(dataclasses.replace(snapshot, sequence=self._sequence, published_at=time.time()))
        except Exception:
            if not self._reported_failure:
                self._reported_failure = True
                logger.exception("Scheduler: could not encode a monitor snapshot; skipping it")
            return
        try:
            # PUB never blocks: with no subscriber, or a slow one, the snapshot is simply dropped.
            self._socket.send(frame, zmq.NOBLOCK)
        except zmq.ZMQError as error:
            logger.warning(f"Scheduler: could not publish a monitor snapshot: {error}")
            return
        self._sequence += 1
        self._newcomer = False

    def close(self) -> None:
        """Close the socket and remove the ipc:// file we bound, so no stale socket is left. Safe to call twice."""
        socket, self._socket = self._socket, None
        if socket is None:
            return
        socket.close(linger=0)
        if self._ipc_path is not None:
            remove_if_same(self._ipc_path, self._file_identity)
