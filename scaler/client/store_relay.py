"""The client's relay path to stores it cannot reach (PROTOCOL.md §19): its own link to the scheduler.

A StoreClient on any thread sends its data message as `relay` through the I/O thread and waits here for
the answer, which the I/O thread hands over when it arrives. Code that runs on the thread that owns the link
(the baton's holder, connection.py: a done-callback that stores an object) may need a relayed answer too:
waiting for it there, that thread reads the link itself, keeps what else arrives for the loop to handle
afterwards (in order), and takes the answer.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from scaler.protocol import messages as m

if TYPE_CHECKING:
    from scaler.client.client_link import ClientLink

logger = logging.getLogger(__name__)


class StoreRelay:
    owner = "Client"

    def __init__(self, queue: Callable[[m.Message], None]) -> None:
        self._queue = queue  # any thread: the message leaves with the I/O thread's next send
        self._condition = threading.Condition()
        self._answers: dict[str, collections.deque[m.Relay]] = {}
        self._owns_link: Callable[[], bool] = lambda: False
        self._link: ClientLink | None = None
        # I/O thread only: messages read while it waited for a relayed answer, for its loop to handle.
        self.deferred: collections.deque[m.Message] = collections.deque()

    def attach(self, link: ClientLink, owns_link: Callable[[], bool]) -> None:
        """The I/O thread, once its link is connected (client_link.py): how it sends now and reads, and how to
        tell whether the calling thread owns the link now (the baton, connection.py)."""
        self._owns_link = owns_link
        self._link = link

    def send(self, store: str, request_id: int, frames: list[m.Buffer]) -> None:
        relay = m.Relay(frames=frames, store=store, request_id=request_id)
        if self._on_io_thread():
            assert self._link is not None
            self._link.send(relay)
            self._link.flush()
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
        return self._owns_link()

    def _read_socket(self, timeout: float) -> None:
        link = self._link
        assert link is not None
        link.flush()  # the relayed request may wait there, behind messages sent before a reconnect
        if not link.wait_input(timeout):
            return
        for message in link.receive(time.monotonic()):
            if isinstance(message, m.Relay):
                self.deliver(message)
            else:
                self.deferred.append(message)
