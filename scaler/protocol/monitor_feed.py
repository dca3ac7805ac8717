"""The subscriber side of the monitor feed: connect to a scheduler's monitor address and read snapshots.

Every read is bounded by a timeout, so a view never hangs on a scheduler that is gone or not started.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import zmq

from scaler.protocol.monitor_messages import MonitorDecodeError, MonitorSnapshot, decode_snapshot

logger = logging.getLogger(__name__)


class MonitorSubscriber:
    """A SUB socket on a monitor address that keeps only the newest snapshot.

    Connecting never fails for a scheduler that is not there yet: ZeroMQ keeps retrying, and
    `receive` returns None until something arrives.
    """

    def __init__(self, address: str, before_connect: Callable[[zmq.Socket], None] | None = None) -> None:
        """`before_connect` is given the socket before it connects (to watch its connection, say)."""
        self._address = address
        self._context = zmq.Context(io_threads=1)
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        # Each snapshot is complete on its own: a view that falls behind wants the newest, not a backlog.
        self._socket.setsockopt(zmq.CONFLATE, 1)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._reported_bad_frame = False
        self.last_received_at: float | None = None  # time.monotonic() of the last good snapshot
        try:
            if before_connect is not None:
                before_connect(self._socket)
            self._socket.connect(address)
        except zmq.ZMQError:
            self.close()
            raise

    @property
    def address(self) -> str:
        return self._address

    @property
    def socket(self) -> zmq.Socket:
        return self._socket

    def receive(self, timeout_seconds: float) -> MonitorSnapshot | None:
        """The newest snapshot that arrives within the timeout (0: only what is already here), else None."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            if not self._socket.poll(remaining_ms, zmq.POLLIN):
                return None
            frame = self._socket.recv(zmq.NOBLOCK)
            try:
                snapshot = decode_snapshot(frame)
            except MonitorDecodeError as error:
                if not self._reported_bad_frame:
                    self._reported_bad_frame = True
                    logger.warning(f"monitor: ignoring what {self._address} sent, it is not a snapshot: {error}")
                continue
            self.last_received_at = time.monotonic()
            return snapshot

    def seconds_since_last(self) -> float | None:
        return None if self.last_received_at is None else time.monotonic() - self.last_received_at

    def close(self) -> None:
        if not self._socket.closed:
            self._socket.close(linger=0)
        if not self._context.closed:
            self._context.term()

    def __enter__(self) -> MonitorSubscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# A feed whose last snapshot is older than this is not taken for serving (snapshots come about once a second).
FRESH_SECONDS = 3.0


class MonitorFeeds:
    """The monitor feeds of a scheduler and its standbys (their monitor addresses, comma-separated in rank order):
    reads them all and gives the snapshots of the one that serves, the first whose newest snapshot is fresh and
    does not stand by (`standingBy`); while none does, those of the first that publishes at all (a standby's empty
    ones, say). With one address it is a MonitorSubscriber."""

    def __init__(
        self, addresses: str, before_connect: Callable[[zmq.Socket, str], None] | None = None,
        fresh_seconds: float = FRESH_SECONDS,
    ) -> None:
        self._fresh_seconds = fresh_seconds
        self._feeds: list[MonitorSubscriber] = []
        self._newest: list[MonitorSnapshot | None] = []
        try:
            for address in (part.strip() for part in addresses.split(",")):
                hook = None if before_connect is None else _bound(before_connect, address)
                self._feeds.append(MonitorSubscriber(address, before_connect=hook))
                self._newest.append(None)
        except zmq.ZMQError:
            self.close()
            raise
        self._shown = 0

    @property
    def address(self) -> str:
        """The monitor address of the feed shown."""
        return self._feeds[self._shown].address

    def receive(self, timeout_seconds: float) -> MonitorSnapshot | None:
        """The newest snapshot of the feed to show that arrives within the timeout (0: only what is here), else None."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        while True:
            arrived = False
            for index, feed in enumerate(self._feeds):
                snapshot = feed.receive(0)
                if snapshot is not None:
                    self._newest[index] = snapshot
                    arrived = arrived or index == self._choose()
            if arrived:
                return self._newest[self._shown]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._wait(min(remaining, 0.1))

    def _choose(self) -> int:
        """Which feed to show now (kept in `_shown`): the first serving one, else the first publishing one."""
        fresh = [
            index for index, feed in enumerate(self._feeds)
            if self._newest[index] is not None and (feed.seconds_since_last() or 0.0) < self._fresh_seconds
        ]
        serving = [index for index in fresh if not self._newest[index].standing_by]  # type: ignore[union-attr]
        chosen = serving or fresh
        if chosen:
            self._shown = chosen[0]
        return self._shown

    def _wait(self, seconds: float) -> None:
        poller = zmq.Poller()
        for feed in self._feeds:
            poller.register(feed.socket, zmq.POLLIN)
        poller.poll(int(seconds * 1000))

    def seconds_since_last(self) -> float | None:
        return self._feeds[self._shown].seconds_since_last()

    def close(self) -> None:
        for feed in self._feeds:
            feed.close()

    def __enter__(self) -> MonitorFeeds:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _bound(hook: Callable[[zmq.Socket, str], None], address: str) -> Callable[[zmq.Socket], None]:
    return lambda socket: hook(socket, address)
