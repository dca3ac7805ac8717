"""A caller waiting for a result serves the client's link itself for a while, when the I/O thread sleeps.

Through the I/O thread, a result wakes two threads in turn: the I/O thread, which reads it and completes the
future, then the caller waiting on that future. When the baton (baton.py) is free, a caller about to wait takes
it, takes the link out of the I/O thread's epoll set, so that what arrives wakes the caller alone, and does
what the I/O thread would do at each wake (connection.py, `_serve`): reads and delivers every message, hands
on what other threads queue, keeps the timers. It gives both back once its future is done, or after
READ_SECONDS: the result of a longer task is delivered by the I/O thread as ever. Only with the ZMTP link,
whose descriptors are plain (libzmq's socket is read by zmq's own thread anyway).
"""

from __future__ import annotations

import contextlib
import select
from typing import Iterator

from scaler.client.baton import Baton
from scaler.utility.fd_poller import EpollPoller
from scaler.utility.zmq_util import POLL_IN

# How long a caller serves the link before it leaves its result to the I/O thread: longer than a small task's
# round trip; what waits meanwhile (other threads' requests, the timers) is served by the caller itself.
READ_SECONDS = 0.05

class CallerRead:
    """Made by the I/O thread with its poller; a caller holding the baton uses it, one at a time."""

    def __init__(self, io_poller: EpollPoller, data: int, wakeup: int, baton: Baton) -> None:
        self._io_poller = io_poller
        self._data = data
        self._baton = baton
        self._poll = select.poll()  # the caller's own wait: the link, and the pipe other threads wake us with
        self._poll.register(data, select.POLLIN)
        self._poll.register(wakeup, select.POLLIN)

    @contextlib.contextmanager
    def session(self) -> Iterator[select.poll | None]:
        """The caller's poll, holding the baton with the link out of the I/O thread's set; None if the baton is
        taken (the I/O thread is awake, or another caller reads)."""
        if not self._baton.try_take():
            yield None
            return
        try:
            self._io_poller.unregister(self._data)
        except OSError:
            self._baton.give_back()
            yield None
            return
        try:
            yield self._poll
        finally:
            # What came meanwhile for others, left unread, wakes the I/O thread as soon as it is back in its set.
            self._io_poller.register(self._data, POLL_IN)
            self._baton.give_back()
