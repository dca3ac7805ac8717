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
