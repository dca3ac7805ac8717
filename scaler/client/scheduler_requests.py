"""The client's requests that wait for the scheduler's answer (clear, drain_workers, shutdown, status).

Answers carry no request id: at most one request of a kind is in flight, so an answer of that kind is the
answer to the one waiting for it (two threads waiting at once would otherwise swap answers). The scheduler
answers in order, so an answer that comes after its request timed out is dropped, not taken by the next
request of that kind.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m


class SchedulerRequests:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[type, tuple[threading.Event, list[m.Message]]] = {}
        self._request_locks: dict[type, threading.Lock] = {}
        self._late_answers: dict[type, int] = {}  # answers to requests that timed out, still to come

    def request(
        self, message: m.Message, reply_type: type, timeout: float, send: Callable[[m.Message], None],
        check_open: Callable[[], None],
    ) -> m.Message:
        """Any thread: send `message` and wait for the answer of `reply_type`; requests of one type from several
        threads go one after another, each within `timeout` of its start. `check_open` raises if the link is
        unusable (before sending, and when the wait ended with no answer because the link broke)."""
        check_open()
        deadline = time.monotonic() + timeout
        with self._lock:
            request_lock = self._request_locks.setdefault(reply_type, threading.Lock())
        if not request_lock.acquire(timeout=timeout):
            raise ConnectionFailedError(
                f"no {reply_type.__name__} from the scheduler within {timeout:g}s (another request of this kind "
                "from this client was still waiting for its own)"
            )
        try:
            check_open()
            event = threading.Event()
            slot: list[m.Message] = []
            with self._lock:
                self._waiting[reply_type] = (event, slot)
            send(message)
            if not event.wait(max(0.0, deadline - time.monotonic())):
                with self._lock:
                    unanswered = self._waiting.get(reply_type, (None, None))[0] is event
                    if unanswered:
                        del self._waiting[reply_type]
                        self._late_answers[reply_type] = self._late_answers.get(reply_type, 0) + 1
                if unanswered:
                    raise ConnectionFailedError(f"no {reply_type.__name__} from the scheduler within {timeout:g}s")
        finally:
            request_lock.release()
        if not slot:
            check_open()
        return slot[0]

    def is_waiting(self, reply_type: type) -> bool:
        return reply_type in self._waiting

    def answer(self, message: m.Message) -> None:
        """I/O thread: an answer from the scheduler, to the request waiting for it (if any)."""
        with self._lock:
            late = self._late_answers.get(type(message), 0)
            if late:
                self._late_answers[type(message)] = late - 1
                waiter = None
            else:
                waiter = self._waiting.pop(type(message), None)
        if waiter is not None:
            waiter[1].append(message)
            waiter[0].set()

    def wake_all(self) -> None:
        """The link broke: every request waiting stops waiting (and its check_open says why)."""
        with self._lock:
            waiters, self._waiting = self._waiting, {}
        for event, _ in waiters.values():
            event.set()
