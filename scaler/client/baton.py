"""Which thread owns the client's connection core and its link to the scheduler now: exactly one at a time.

The I/O thread holds the baton except while it sleeps in its poll; a caller thread may take it then (never
waiting for it), hand what it queued to the core and write it to the socket itself, and give it back
(connection.py). Not reentrant: a done-callback run by the holder that queues more finds the baton taken and
leaves its work to the queue, so the core is never entered twice.
"""

from __future__ import annotations

import threading


class Baton:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None

    def try_take(self) -> bool:
        """Take it if nobody holds it; never waits."""
        if self._lock.acquire(blocking=False):
            self._holder = threading.get_ident()
            return True
        return False

    def take(self, timeout: float) -> bool:
        """Take it, waiting at most `timeout` (a holder keeps it for one hand-off at most)."""
        if self._lock.acquire(timeout=timeout):
            self._holder = threading.get_ident()
            return True
        return False

    def give_back(self) -> None:
        self._holder = None
        self._lock.release()

    def held_here(self) -> bool:
        """Whether the calling thread holds it (then it owns the core and may call it)."""
        return self._holder == threading.get_ident()
