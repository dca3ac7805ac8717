"""A caller about to wait for its future reads the link to the scheduler itself while nobody else holds the
baton (leader/follower), instead of sleeping until the I/O thread has read the result and wakes it.

Only with the ZMTP link (client_link.py), whose socket this thread can read; with libzmq's the result would
still pass through zmq's I/O thread. The leader holds the baton (baton.py) only for one poll and the pass that
follows it, and watches the wake-up pipe as the I/O thread does, so that what other threads queue meanwhile
still leaves at once. It leads while the future is not done, its timeout has not passed and the baton is free
when it asks; then the caller waits for the future as usual, and whoever holds the baton completes it.
"""

from __future__ import annotations

import select
import time
from concurrent.futures import Future
from typing import Any, Callable

from scaler.client.baton import Baton


class CallerLead:
    def __init__(
        self, baton: Baton, data: int, wakeup: int, run_pass: Callable[[bool, bool, float], None],
        seconds_to_decide: Callable[[float], float],
    ) -> None:
        self._baton = baton
        self._data = data
        self._wakeup = wakeup
        self._poll = select.poll()  # used by the baton's holder only
        self._poll.register(data, select.POLLIN)
        self._poll.register(wakeup, select.POLLIN)
        self._run_pass = run_pass  # (link readable, woken, now): the holder's turn (connection.py)
        self._seconds_to_decide = seconds_to_decide

    def wait(self, future: Future[Any], timeout: float | None) -> float | None:
        """Lead until `future` is done, `timeout` has passed or the baton is taken; what is left of `timeout`."""
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        while not future.done() and (deadline is None or now < deadline):
            if self._baton.wanted or not self._baton.try_take():
                break
            try:
                if future.done():
                    break
                wait = self._seconds_to_decide(now)
                if deadline is not None:
                    wait = min(wait, deadline - now)
                ready = dict(self._poll.poll(int(wait * 1000) + 1))
                now = time.monotonic()
                self._run_pass(self._data in ready, self._wakeup in ready, now)
            finally:
                self._baton.give_back()
        return None if deadline is None else max(0.0, deadline - time.monotonic())
