"""The client's relay path to stores it cannot reach (PROTOCOL.md §19): its own link to the scheduler.

A StoreClient on any thread sends its data message as `relay` through the I/O thread and waits here for
the answer, which the I/O thread hands over when it arrives. Code that runs on the I/O thread itself (a
done-callback that stores an object) may need a relayed answer too: waiting for it there, the I/O thread
reads its socket itself, keeps what else arrives for the loop to handle afterwards (in order), and takes
the answer.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

import zmq

from scaler.protocol import messages as m
from scaler.utility.zmq_util import has_input, receive_frames

logger = logging.getLogger(__name__)


class StoreRelay:
    owner = "Client"

    def __init__(self, queue: Callable[[m.Message], None]) -> None:
        self._queue = queue  # any thread: the message leaves with the I/O thread's next send
        self._condition = threading.Condition()
        self._answers: dict[str, collections.deque[m.Relay]] = {}
        self._io_thread: threading.Thread | None = None
        self._socket: zmq.Socket | None = None
        self._send_now: Callable[[m.Message], None] | None = None
        self._send_unsent: Callable[[], None] | None = None
        # I/O thread only: messages read while it waited for a relayed answer, for its loop to handle.
        self.deferred: collections.deque[m.Message] = collections.deque()

    def attach(
        self, socket: zmq.Socket, send_now: Callable[[m.Message], None], send_unsent: Callable[[], None]
    ) -> None:
        """The I/O thread, once its socket is connected: how it sends now, and sends what zmq could not take yet."""
        self._io_thread = threading.current_thread()
        self._socket = socket
        self._send_now = send_now
        self._send_unsent = send_unsent

    def send(self, store: str, request_id: int, frames: list[m.Buffer]) -> None:
        relay = m.Relay(frames=frames, store=store, request_id=request_id)
        if self._on_io_thread():
            assert self._send_now is not None
            self._send_now(relay)
        else:
            self._queue(relay)

    def deliver(self, relay: m.Relay) -> None:
        """I/O thread: an answer relayed from a store."""
        with self._condition:
            self._answers.setdefault(relay.store, collections.deque()).append(relay)
            self._condition.notify_all()

    def receive(self, store: str, deadline: float) -> m.Relay | None:
        on_io_thread = self._on_io_thread()
        while True:
            with self._condition:
                answers = self._answers.get(store)
                if answers:
                    return answers.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                if not on_io_thread:
                    self._condition.wait(remaining)
                    continue
            self._read_socket(remaining)

    def _on_io_thread(self) -> bool:
        return threading.current_thread() is self._io_thread

    def _read_socket(self, timeout: float) -> None:
        socket = self._socket
        assert socket is not None and self._send_unsent is not None
        self._send_unsent()  # the relayed request may wait there, behind messages sent before a reconnect
        if not socket.poll(max(1, int(timeout * 1000))):
            return
        while has_input(socket):
            try:
                message = m.decode(receive_frames(socket))
            except m.ProtocolDecodeError as error:
                logger.warning(f"Client: dropped an undecodable message from the scheduler: {error}")
                continue
            if isinstance(message, m.Relay):
                self.deliver(message)
            else:
                self.deferred.append(message)
